"""Alignment by private set intersection: NVFlare's DH-PSI (nvflare.app_common.psi +
nvflare.app_opt.psi.dh_psi, OpenMined PSI underneath) over the sites' ID columns, K >= 2 sites.

NVFlare provides the protocol: the server workflow `DhPSIController` / `DhPSIWorkFlow`, the site
executor `PSIExecutor` and the task handler `DhPSITaskHandler`. vflflare adds:

- `VFLSitePSI`, the site's `PSI` component: its items are the site's train and test IDs, tagged
  ``train:<id>`` / ``test:<id>`` so one PSI run aligns both tables; read with vflflare's own loader,
  so bad data fails here with the usual message.
- `VFLPSIWriter`, which stores the intersection as ``<psi root>/<site>/psi_intersection.csv``
  (psi root: the writer's ``output_root`` argument, else ``"psi_root"`` in the site's
  local/vflflare.json, else VFLFLARE_PSI_ROOT, else the site's data root, i.e. next to its
  train.csv; with none of these, the embedded default, it goes to the site's job folder and only a
  VFL phase in the same job can use it). Later jobs with ``alignment: psi`` read it from there.
- `ScoreFilePSI` and `InJobPSIWriter`, the same for a scoring job (vertical_inference): the items are
  the IDs of the site's file of new rows, tagged ``score:<id>``, and the intersection stays in the job
  (a training job's stored intersection is left as it was).
- `ExactDhPSITaskHandler`: NVFlare's task handler with OpenMined's exact RAW setup in place of its
  Bloom filter, which gave a wrong intersection in about 1 % of runs at fpr 1e-11 (3 of 300 trials of
  417 x 416 IDs with one shared; NVFlare's own docstring cites OpenMined/PSI#143). RAW sends the
  encrypted server items themselves: more bytes, no false positives.
- Two sites (`protocol="ecdh"`, the default): the PSI stages of NVFlare's workflow (prepare, then tasks of
  NVFlare's PSI task) run vflflare's one-exchange ECDH-PSI (`protocol/ecdh_psi.py`): three task rounds in
  which both sites work at once, 2 EC operations per ID and site on every core, instead of NVFlare's forward
  and backward passes (8 rounds, about 7 EC operations per ID over both sites, one core). Same result: each
  site's items that the other has, in its own item order; same disclosure (sites: the intersection and the
  other's size; coordinator: sizes and the intersection's size). `protocol="nvflare"`, and any job with
  more than two sites, runs NVFlare's forward/backward passes as before.
- `VFLPSIController` / `CheckedDhPSIWorkflow`: NVFlare's DH-PSI workflow with the checks a VFL job
  needs. Every site must answer (a site that fails reports its own error message, via
  `VFLPSIExecutor`); an empty intersection stops the job with an error naming the sites and their
  set sizes (NVFlare's workflow would go on with a site's full set in place of an empty
  intermediate result); the whole run has a timeout. It writes vflflare_results.json like every
  vflflare job.

The coordinator sees only what DH-PSI shows it: set sizes and the intersection's size; it never
sees an ID. Sites learn the intersection, which is what alignment is for.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from nvflare.apis.client import Client
from nvflare.apis.controller_spec import ClientTask
from nvflare.apis.dxo import DXO
from nvflare.apis.fl_constant import ReturnCode
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable, make_reply
from nvflare.apis.signal import Signal
from nvflare.app_common.app_constant import PSIConst
from nvflare.app_common.psi.dh_psi.dh_psi_controller import DhPSIController
from nvflare.app_common.psi.dh_psi.dh_psi_workflow import DhPSIWorkFlow
from nvflare.app_common.psi.psi_executor import PSIExecutor
from nvflare.app_common.psi.psi_spec import PSI
from nvflare.app_common.psi.psi_workflow_spec import PSIWorkflow
from nvflare.app_common.psi.psi_writer_spec import PSIWriter
from nvflare.app_common.workflows.broadcast_operator import BroadcastAndWait
from nvflare.app_opt.psi.dh_psi.dh_psi_server import PSIServer
from nvflare.app_opt.psi.dh_psi.dh_psi_task_handler import DhPSITaskHandler

from vflflare.data.errors import site_owner
from vflflare.data.loading import DataRequest
from vflflare.flare.messages import ERROR_HEADER
from vflflare.flare.site_config import read_site_config, resolve_party_data_root, site_config_path
from vflflare.protocol.alignment import PSI_FILE, psi_file, psi_root, read_psi_file, tag_items, write_psi_file
from vflflare.protocol.checkpoint import runs_root
from vflflare.protocol.ecdh_psi import ECDHParty
from vflflare.protocol.scoring import LATEST, SCORE_FILE, SiteScorer, score_items
from vflflare.protocol.topology import check_joined
from vflflare.protocol.views import load_site_view
from vflflare.results import RESULTS_FILE

# component ids shared by the server and client configs of jobs/psi and of `vflflare jobs --psi`
PSI_TASK = PSIConst.TASK  # "PSI"
PSI_ALGO_ID = "dh_psi"
LOCAL_PSI_ID = "local_psi"
PSI_WRITER_ID = "psi_writer"
PSI_ROOT_KEY = "psi_root"  # optional key of the site's local/vflflare.json
SITES_KEY = "vflflare_psi_sites"  # the participants, sent with the prepare task (the embedded default needs them)
PSI_RESULTS_FILE = "psi_results.json"
# the two-site protocol's stages (values of PSIConst.TASK_KEY in NVFlare's PSI task) and its payload key
ECDH_OFFER, ECDH_ANSWER, ECDH_FINISH = "ecdh_offer", "ecdh_answer", "ecdh_finish"
ECDH_POINTS = "ecdh_points"
PROTOCOLS = ("ecdh", "nvflare")


class PSIError(RuntimeError):
    """The PSI phase cannot give a usable intersection."""


# ------------------------------------------------------------------------------------------- sites
def resolve_psi_root(fl_ctx: FLContext, site: str, data_root: str | None, argument: str | None = None) -> str | None:
    """Where this site's PSI outputs live: argument, then "psi_root" in local/vflflare.json, then
    VFLFLARE_PSI_ROOT, then the data root; None when there is none (embedded default)."""
    path = site_config_path(fl_ctx)
    configured = read_site_config(path, site_owner(site)).get(PSI_ROOT_KEY) if path is not None else None
    if configured and not Path(configured).is_absolute() and path is not None:
        configured = str((path.parent / configured).resolve())
    return psi_root(data_root, argument or configured)


class VFLPSIWriter(PSIWriter):
    def __init__(self, output_root: str | None = None) -> None:
        """output_root: the psi root for this site (see the module docstring for the default)."""
        super().__init__()
        self.output_root = output_root
        self.data_root: str | None = None  # the PSI component's data_root argument, if any

    def output_path(self, fl_ctx: FLContext) -> Path:
        site = fl_ctx.get_identity_name()
        data_root = resolve_party_data_root(self.data_root, fl_ctx, site)
        root = resolve_psi_root(fl_ctx, site, data_root, self.output_root)
        if root is None:  # embedded default: the site's own job folder
            engine = fl_ctx.get_engine()
            return Path(engine.get_workspace().get_run_dir(fl_ctx.get_job_id())) / PSI_FILE
        return psi_file(root, site)

    def clear(self, fl_ctx: FLContext) -> None:
        """Remove a previous run's output, so a failed run leaves no stale intersection behind."""
        path = self.output_path(fl_ctx)
        if path.is_file():
            path.unlink()

    def save(self, intersection: list[str], overwrite_existing: bool, fl_ctx: FLContext) -> None:
        path = self.output_path(fl_ctx)
        if path.exists() and not overwrite_existing:
            raise FileExistsError(f"{path} exists and overwrite_existing is False")
        write_psi_file(path, intersection)
        self.log_info(fl_ctx, f"PSI intersection of {len(intersection)} items written to {path}")


class VFLSitePSI(PSI):
    """The site's PSI items: its train and test IDs, tagged. The intersection goes to the writer (and
    stays in memory for a VFL phase that runs in the same job)."""

    def __init__(
        self,
        psi_writer_id: str = PSI_WRITER_ID,
        data_root: str | None = None,
        seed: int = 0,
        id_normalize: list[str] | None = None,
    ) -> None:
        """data_root: overrides the site's configured data root. seed: only for the embedded default
        table, whose split depends on the seed and the site names. id_normalize: the ID normalisation
        of the VFL jobs that will align on this intersection (vflflare.data.ids)."""
        super().__init__(psi_writer_id)
        self.data_root = data_root
        self.seed = seed
        self.id_normalize = id_normalize
        self.sites: list[str] | None = None
        self.site: str | None = None

    def initialize(self, fl_ctx: FLContext) -> None:
        super().initialize(fl_ctx)
        self.site = fl_ctx.get_identity_name()
        if isinstance(self.psi_writer, VFLPSIWriter) and self.data_root:
            self.psi_writer.data_root = self.data_root

    def load_items(self) -> list[str]:
        site = self.site or self.fl_ctx.get_identity_name()
        data_root = resolve_party_data_root(self.data_root, self.fl_ctx, site)
        request = DataRequest(self.sites or [site], data_root, self.seed, id_normalize=self.id_normalize or ())
        tables = load_site_view(site, request)
        if isinstance(self.psi_writer, VFLPSIWriter):
            self.psi_writer.clear(self.fl_ctx)
        self.intersection = None
        return tag_items(tables.train_ids, tables.test_ids)


class ScoreFilePSI(PSI):
    """A scoring job's PSI items: the IDs of the site's file of new rows, tagged score:<id>, read with the
    saved model's ID column and normalisation exactly as the scoring step reads them."""

    def __init__(
        self,
        psi_writer_id: str = PSI_WRITER_ID,
        model_job: str = LATEST,
        score_file: str = SCORE_FILE,
        data_root: str | None = None,
    ) -> None:
        super().__init__(psi_writer_id)
        self.model_job, self.score_file, self.data_root = model_job, score_file, data_root

    def load_items(self) -> list[str]:
        site = self.fl_ctx.get_identity_name()
        data_root = resolve_party_data_root(self.data_root, self.fl_ctx, site)
        scorer = SiteScorer(site, data_root, runs_root(data_root, site))
        self.intersection = None
        return score_items(scorer.new_rows(self.model_job, self.score_file)["ids"])


class InJobPSIWriter(PSIWriter):
    """Keeps no file: a scoring job's intersection is used by its own scoring phase only."""

    def save(self, intersection: list[str], overwrite_existing: bool, fl_ctx: FLContext) -> None:
        self.log_info(fl_ctx, f"PSI intersection of {len(intersection)} score rows kept for this job")


class ExactPSIServer(PSIServer):
    """NVFlare's DH-PSI server whose setup message holds the encrypted items (RAW), not a Bloom filter."""

    def setup(self, client_items_size: int) -> bytes:
        import private_set_intersection.python as psi  # noqa: PLC0415 - NVFlare's optional native dependency

        return self.psi_server.CreateSetupMessage(
            self.fpr, client_items_size, self.items, psi.DataStructure.RAW
        ).SerializeToString()


class ExactDhPSITaskHandler(DhPSITaskHandler):
    """NVFlare's DhPSITaskHandler; every PSI server it makes is an ExactPSIServer over the same items.
    It also answers the two-site ECDH stages (`ecdh_offer`, `ecdh_answer`, `ecdh_finish`)."""

    def __init__(self, local_psi_id: str, workers: int = 0) -> None:
        """workers: threads for the ECDH stages (0: VFLFLARE_PSI_WORKERS, else every core of the site)."""
        super().__init__(local_psi_id)
        self.workers = workers
        self._party: ECDHParty | None = None

    def execute_task(self, task_name: str, shareable: Shareable, fl_ctx: FLContext, abort_signal: Signal) -> Shareable:
        stage = shareable.get(PSIConst.TASK_KEY) if task_name == PSIConst.TASK else None
        if stage not in (ECDH_OFFER, ECDH_ANSWER, ECDH_FINISH):
            return super().execute_task(task_name, shareable, fl_ctx, abort_signal)
        self.client_name = fl_ctx.get_identity_name()
        result = Shareable()
        if stage == ECDH_OFFER:  # a new key and a new private order for every run
            self.intersects = None
            self._party = ECDHParty(self.get_items(), self.workers or None)
            result[ECDH_POINTS] = self._party.offer()
            return result
        if self._party is None:
            raise PSIError(f"PSI stage {stage} before {ECDH_OFFER}")
        if stage == ECDH_ANSWER:
            result[ECDH_POINTS] = self._party.answer(bytes(shareable[ECDH_POINTS]))
            return result
        intersection = self._party.intersection(bytes(shareable[ECDH_POINTS]))
        self._party = None
        self.intersects = intersection
        self.local_psi_handler.save(intersection)
        result[PSIConst.ITEMS_SIZE] = len(intersection)
        return result

    @property
    def psi_server(self) -> PSIServer | None:
        return self._exact_server

    @psi_server.setter
    def psi_server(self, server: PSIServer | None) -> None:
        self._exact_server = None if server is None else ExactPSIServer(server.items, server.fpr)


class VFLPSIExecutor(PSIExecutor):
    """NVFlare's PSIExecutor, except that a failing site says why: its error message rides back in
    the reply (NVFlare's only returns a code), and the participant list reaches the PSI component."""

    def __init__(self, psi_algo_id: str = PSI_ALGO_ID) -> None:
        super().__init__(psi_algo_id)

    def execute(self, task_name: str, shareable: Shareable, fl_ctx: FLContext, abort_signal: Signal) -> Shareable:
        init_rc = self._check_init_status(fl_ctx)
        if init_rc:
            return make_reply(init_rc)
        if abort_signal.triggered:
            return make_reply(ReturnCode.TASK_ABORTED)
        try:
            local = getattr(self.task_handler, "local_psi_handler", None)
            if shareable.get(SITES_KEY) is not None and isinstance(local, VFLSitePSI):
                local.sites = [str(s) for s in shareable[SITES_KEY]]
            result = self.task_handler.execute_task(task_name, shareable, fl_ctx, abort_signal)
            if result is None:
                raise PSIError(f"PSI task {shareable.get(PSIConst.TASK_KEY)} gave no result")
            return DXO(data_kind=self.get_data_kind(), data=result).to_shareable()
        except Exception as error:
            message = f"{type(error).__name__}: {error}"
            self.log_error(
                fl_ctx, f"PSI task {shareable.get(PSIConst.TASK_KEY)} failed: {message}\n{traceback.format_exc()}"
            )
            reply = make_reply(ReturnCode.EXECUTION_RESULT_ERROR)
            reply.set_header(ERROR_HEADER, message)
            return reply


def psi_source(fl_ctx: FLContext, site: str, data_root: str | None) -> Callable[[], list[str]]:
    """How a VFL executor gets its site's PSI intersection: from the PSI component when the PSI
    workflow ran earlier in the same job (`vflflare jobs --psi`), else from the PSI output file of an
    earlier PSI job (jobs/psi)."""

    def load() -> list[str]:
        component = fl_ctx.get_engine().get_component(LOCAL_PSI_ID)
        if isinstance(component, PSI):
            items = component.get_intersection()
            if items is None:
                raise PSIError(f"site '{site}': the PSI workflow of this job left no intersection on this site")
            return list(items)
        root = resolve_psi_root(fl_ctx, site, data_root)
        if root is None:
            raise PSIError(
                f"site '{site}': alignment 'psi' needs the output of a PSI job, but this site has no data root and "
                f"no psi root (set VFLFLARE_PSI_ROOT, or generate the VFL job with `vflflare jobs --psi`)"
            )
        return read_psi_file(psi_file(root, site), site_owner(site))

    return load


# ------------------------------------------------------------------------------------------ server
class CheckedDhPSIWorkflow(DhPSIWorkFlow):
    """NVFlare's DH-PSI workflow, with every site required and an empty intersection an error."""

    def __init__(self, bloom_filter_fpr: float = 1e-11, protocol: str = "ecdh") -> None:
        super().__init__(bloom_filter_fpr)
        self.protocol = protocol
        self.ran: str | None = None  # the protocol that ran: "ecdh" (two sites) or "nvflare"
        self.items_per_site: dict[str, int] = {}
        self.final_size: int | None = None

    def _sites(self) -> list[str]:
        return sorted(c.name for c in self.fl_ctx.get_engine().get_clients())

    def prepare_sites(self, abort_signal: Signal) -> None:
        """NVFlare's prepare step (every site loads its items and reports their number), with the
        participant list attached and a check that every site answered with a non-empty set."""
        sites = self._sites()
        inputs = Shareable()
        inputs[PSIConst.TASK_KEY] = PSIConst.TASK_PREPARE
        inputs[PSIConst.BLOOM_FILTER_FPR] = self.bloom_filter_fpr
        inputs[SITES_KEY] = sites
        results = (
            BroadcastAndWait(self.fl_ctx, self.controller).broadcast_and_wait(
                task_name=self.task_name,
                task_input=inputs,
                fl_ctx=self.fl_ctx,
                targets=None,
                min_responses=len(sites),
                abort_signal=abort_signal,
            )
            or {}
        )
        if abort_signal.triggered:
            raise PSIError("aborted while the sites loaded their IDs")
        self.items_per_site = {s: int(results[s].data.get(PSIConst.ITEMS_SIZE, 0)) for s in sites if s in results}
        missing = [s for s in sites if s not in results]
        if missing:
            raise PSIError(f"sites {missing} did not report their IDs (see their logs)")
        empty = [s for s, n in self.items_per_site.items() if n == 0]
        if empty:
            raise PSIError(f"sites {empty} have no IDs ({self._sizes()})")
        self.ordered_sites = self.get_ordered_sites(results)

    def pairwise_intersect(self, ordered_sites, response_msg):
        sizes = super().pairwise_intersect(ordered_sites, response_msg)
        if sizes is None:
            raise PSIError("aborted during the PSI forward pass")
        if any(int(n) == 0 for n in sizes.values()):
            raise PSIError(f"the PSI intersection is empty: the sites share no IDs ({self._sizes()})")
        return sizes

    def run(self, abort_signal: Signal) -> bool:
        self.ran = "ecdh" if self.protocol == "ecdh" and len(self.ordered_sites) == 2 else "nvflare"
        if self.ran == "ecdh":
            self.run_two_sites(abort_signal)
        else:
            super().run(abort_signal)  # NVFlare checks that every site ends with the same intersection size
        if abort_signal.triggered:
            raise PSIError("aborted during the PSI")
        final = {int(n) for n in self.backward_processed.values()}
        if len(final) != 1:
            raise PSIError(f"the sites ended with different intersection sizes {self.backward_processed}")
        self.final_size = final.pop()
        return True

    def run_two_sites(self, abort_signal: Signal) -> None:
        """vflflare's ECDH-PSI (protocol/ecdh_psi.py): both sites offer their encrypted items, encrypt the
        other's once more, and find their own items in the result; each step one task to both sites."""
        self.abort_signal = abort_signal
        a, b = (site.name for site in self.ordered_sites)
        offers = self._stage(ECDH_OFFER, {a: None, b: None}, ECDH_POINTS)
        answers = self._stage(ECDH_ANSWER, {a: offers[b], b: offers[a]}, ECDH_POINTS)
        sizes = self._stage(ECDH_FINISH, {a: answers[b], b: answers[a]}, PSIConst.ITEMS_SIZE)
        if any(int(n) == 0 for n in sizes.values()):
            raise PSIError(f"the PSI intersection is empty: the sites share no IDs ({self._sizes()})")
        self.forward_processed.update(sizes)
        self.backward_processed.update(sizes)

    def _stage(self, stage: str, points: dict[str, bytes | None], key: str) -> dict:
        task_inputs = {}
        for site, value in points.items():
            inputs = Shareable()
            inputs[PSIConst.TASK_KEY] = stage
            if value is not None:
                inputs[ECDH_POINTS] = value
            task_inputs[site] = inputs
        results = BroadcastAndWait(self.fl_ctx, self.controller).multicasts_and_wait(
            task_name=self.task_name, task_inputs=task_inputs, fl_ctx=self.fl_ctx, abort_signal=self.abort_signal
        )
        missing = [site for site in points if not results or site not in results]
        if self.abort_signal.triggered or missing:
            raise PSIError(f"PSI stage {stage}: no answer from sites {missing} (see their logs)")
        return {site: results[site].data[key] for site in points}

    def _sizes(self) -> str:
        items = ", ".join(f"{s}: {n}" for s, n in sorted(self.items_per_site.items()))
        return f"train + test IDs per site: {items}"


class VFLPSIController(DhPSIController):
    """Server side of the PSI phase: NVFlare's DH-PSI controller with vflflare's checks, a timeout
    and a result record. In a VFL job generated with --psi it is the first workflow; when it fails,
    the job ends with its error and the VFL workflow never starts."""

    def __init__(
        self,
        min_sites: int = 2,
        timeout: float = 1800.0,
        bloom_filter_fpr: float = 1e-11,
        sites: list[str] | None = None,
        protocol: str = "ecdh",
    ) -> None:
        """sites: the job's sites by name, when it names them (protocol/topology.py). protocol: "ecdh"
        (two sites: vflflare's one-exchange ECDH-PSI; more sites: NVFlare's passes) or "nvflare" (NVFlare's
        forward and backward DH-PSI passes for any number of sites)."""
        super().__init__()
        if protocol not in PROTOCOLS:
            raise ValueError(f"PSI protocol {protocol!r}: expected one of {list(PROTOCOLS)}")
        self.min_sites, self.sites = min_sites, sites  # as given: FedJob exports args that differ from the defaults
        self.protocol = protocol
        self.timeout = timeout
        self.bloom_filter_fpr = bloom_filter_fpr
        self.site_errors: dict[str, str] = {}
        self._abort: Signal | None = None
        self._timed_out = False

    def load_psi_workflow(self, fl_ctx: FLContext) -> PSIWorkflow:
        workflow = CheckedDhPSIWorkflow(self.bloom_filter_fpr, self.protocol)
        workflow.initialize(fl_ctx, controller=self)
        return workflow

    def handle_client_errors(self, rc: str, client_task: ClientTask, fl_ctx: FLContext) -> None:
        """A site failed a PSI step: keep its message and stop waiting for the others."""
        result = client_task.result
        message = (result.get_header(ERROR_HEADER) if result is not None else None) or f"return code {rc}"
        self.site_errors[client_task.client.name] = message
        self.log_error(fl_ctx, f"site {client_task.client.name} failed PSI task: {message}")
        if self._abort is not None:
            self._abort.trigger(True)

    def process_result_of_unknown_task(
        self, client: Client, task_name: str, client_task_id: str, result: Shareable, fl_ctx: FLContext
    ) -> None:
        self.log_warning(fl_ctx, f"ignoring late result of task '{task_name}' from {client.name}")

    def control_flow(self, abort_signal: Signal, fl_ctx: FLContext) -> None:
        start = time.monotonic()
        engine = fl_ctx.get_engine()
        sites = sorted(c.name for c in engine.get_clients())
        run_dir = engine.get_workspace().get_run_dir(fl_ctx.get_job_id())
        self._abort = abort_signal
        timer = threading.Timer(self.timeout, self._on_timeout)
        timer.daemon = True
        timer.start()
        workflow: CheckedDhPSIWorkflow = self.psi_workflow  # type: ignore[assignment]
        try:
            check_joined(sites, self.sites or [], self.min_sites)  # the job's sites, named when missing or extra
            workflow.pre_process(abort_signal)
            workflow.run(abort_signal)
        except Exception as error:
            message = self._reason(error)
            self.log_error(fl_ctx, f"vflflare PSI failed: {message}\n{traceback.format_exc()}")
            self._write(
                run_dir,
                {
                    "algorithm": "psi",
                    "sites": sites,
                    "error": message,
                    "psi": {"items_per_site": workflow.items_per_site},
                    "wall_s": time.monotonic() - start,
                },
            )
            self.system_panic(f"vflflare PSI: {message}", fl_ctx)
            return
        finally:
            timer.cancel()
        wall = time.monotonic() - start
        record = {
            "algorithm": "psi",
            "sites": sites,
            "psi": {
                "items_per_site": workflow.items_per_site,
                "intersection": workflow.final_size,
                "protocol": workflow.ran,
                "output": f"each site's <psi root>/<site>/{PSI_FILE} (psi root: VFLFLARE_PSI_ROOT or the data root)",
            },
            "phases": [{"name": "psi", "wall_s": wall}],
            "wall_s": wall,
        }
        self._write(run_dir, record)
        summary = (
            f"vflflare PSI: {workflow.final_size} shared items (tagged IDs) among {', '.join(sites)}; "
            f"items per site {workflow.items_per_site}; {wall:.1f} s"
        )
        self.log_info(fl_ctx, summary)
        print(summary, flush=True)

    def _on_timeout(self) -> None:
        self._timed_out = True
        if self._abort is not None:
            self._abort.trigger(True)

    def _reason(self, error: Exception) -> str:
        if self.site_errors:
            return "; ".join(f"site '{s}' failed PSI: {m}" for s, m in sorted(self.site_errors.items()))
        if self._timed_out:
            return f"PSI did not finish within {self.timeout:.0f} s"
        if isinstance(error, PSIError):
            return str(error)
        return f"{type(error).__name__}: {error}"

    @staticmethod
    def _write(run_dir: str, results: dict) -> str:
        """vflflare_results.json (a VFL workflow that runs next in the same job replaces it) and
        psi_results.json (kept)."""
        os.makedirs(run_dir, exist_ok=True)
        for name in (PSI_RESULTS_FILE, RESULTS_FILE):
            path = os.path.join(run_dir, name)
            with open(path, "w") as f:
                json.dump(results, f, indent=2)
        return path
