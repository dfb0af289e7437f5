"""Server side of every vflflare job: runs one algorithm's phases and writes vflflare_results.json."""

from __future__ import annotations

import json
import os
import shutil
import traceback
import uuid

from nvflare.apis.client import Client
from nvflare.apis.event_type import EventType
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.impl.controller import Controller
from nvflare.apis.shareable import Shareable
from nvflare.apis.signal import Signal
from nvflare.apis.wf_comm_spec import WFCommSpec

from vflflare.code_identity import code_identity
from vflflare.config import SERVER
from vflflare.data.loading import load_label_tables
from vflflare.flare.analytics import FlareTracker
from vflflare.flare.he_filters import workspace_context
from vflflare.flare.site_config import local_enforcement, local_private_seed, resolve_party_data_root
from vflflare.flare.site_health import SiteHealth
from vflflare.flare.transport import FlareTransport
from vflflare.metrics import LAZY_IMPORTS
from vflflare.privacy.private_randomness import PrivateRandomness
from vflflare.protocol.checkpoint import runs_root
from vflflare.protocol.model_ids import SIMULATOR_JOB_ID, new_model_id
from vflflare.protocol.recording import MESSAGES_FILE, RecordingTransport, save_messages
from vflflare.protocol.runner import run_algorithm
from vflflare.protocol.topology import COORDINATOR, check_job_sites
from vflflare.protocol.views import job_data_request
from vflflare.registry import make_config
from vflflare.results import RESULTS_FILE, completed, failed, format_table
from vflflare.torch_runtime import prepare_torch
from vflflare.tracking import DETAILS

# NVFlare marks a task done on its next check of the tasks (default every 0.2 s); a phase task waits for
# that, so a job of a few phases paid about 0.1 s per task round
TASK_CHECK_PERIOD_S = 0.05


class VFLController(Controller):
    def __init__(
        self,
        config: dict | None = None,
        min_sites: int = 2,
        task_timeout: float = 1800.0,
        step_timeout: float = 120.0,
        data_root: str | None = None,
        record_messages: bool = False,
    ) -> None:
        """config: the job's settings (vflflare.config; the algorithm's plug-in validates them).
        min_sites: at least this many sites must join (the recipe's min_clients; meta.json asks NVFlare for
        2 whatever this is, and the coordinator names what is missing: protocol/topology.py).
        data_root: where a server-hosted label party finds its files
        (default: the server's local/vflflare.json, then VFLFLARE_DATA_ROOT, else the embedded
        default; see vflflare.flare.site_config).
        record_messages: keep every request and reply the coordinator relays (all that each party received) in
        the run folder as vflflare_messages.pt, for `vflflare attack --env sim`: an audit of a test run."""
        super().__init__(task_check_period=TASK_CHECK_PERIOD_S)
        self.config = config or {}
        self.cfg = make_config(self.config)
        self.min_sites = min_sites
        self.task_timeout, self.step_timeout = task_timeout, step_timeout
        self.data_root = data_root
        self.record_messages = record_messages
        self.health = SiteHealth()  # sites known to have stopped; the transport fails fast on them

    def set_communicator(self, communicator: WFCommSpec) -> None:
        super().set_communicator(communicator)
        # NVFlare's dead-job report (a site's parent no longer lists this job in its heartbeat) goes
        # to the communicator only, which waits out a grace period (60 s) before it fires
        # CLIENT_DISCONNECTED: note the site at once as well
        report = getattr(communicator, "process_dead_client_report", None)
        if report is not None:

            def noted(client_name: str, fl_ctx: FLContext) -> None:
                self._site_dead(client_name, "NVFlare reported its job process dead (dead-job report)", fl_ctx)
                report(client_name, fl_ctx)

            communicator.process_dead_client_report = noted

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        super().handle_event(event_type, fl_ctx)
        if event_type == EventType.CLIENT_DISCONNECTED:
            site = fl_ctx.get_prop(FLContextKey.DISCONNECTED_CLIENT_NAME)
            if site:
                self._site_dead(site, "NVFlare reported the site disconnected (no heartbeat)", fl_ctx)

    def _site_dead(self, site: str, reason: str, fl_ctx: FLContext) -> None:
        if self.health.mark_dead(site, reason):
            self.log_error(fl_ctx, f"site '{site}' stopped: {reason}")

    def start_controller(self, fl_ctx: FLContext) -> None:
        scoring = LAZY_IMPORTS if self.cfg.label_owner == SERVER else ()
        prepare_torch(self.cfg.num_threads, warm_in_background=True, also_import=scoring)

    def stop_controller(self, fl_ctx: FLContext) -> None:
        pass

    def process_result_of_unknown_task(
        self, client: Client, task_name: str, client_task_id: str, result: Shareable, fl_ctx: FLContext
    ) -> None:
        self.log_warning(fl_ctx, f"ignoring late result of task '{task_name}' from {client.name}")

    def control_flow(self, abort_signal: Signal, fl_ctx: FLContext) -> None:
        engine = fl_ctx.get_engine()
        sites = sorted(c.name for c in engine.get_clients())
        run_dir = engine.get_workspace().get_run_dir(fl_ctx.get_job_id())
        net = FlareTransport(
            self,
            fl_ctx,
            abort_signal,
            sites,
            self.cfg.wire_dtype,
            self.task_timeout,
            self.step_timeout,
            he=self.cfg.he,
            health=self.health,
            stall_timeout=self.cfg.stall_timeout,
            join_timeout=self.cfg.join_timeout,
        )
        net.ledger.on_phase = lambda name: self.log_info(fl_ctx, f"vflflare phase '{name}' started")
        tracker = FlareTracker(self, fl_ctx, on_site=False)
        # the id to resume this run by (a checkpointed run); resuming keeps the id of the run it goes on with
        run_id = (self.cfg.resume or uuid.uuid4().hex[:12]) if self.cfg.checkpoint or self.cfg.resume else None
        try:
            data_root = resolve_party_data_root(self.data_root, fl_ctx, SERVER)
            DETAILS.info(f"label party 'server': data root: {data_root or '<embedded default>'}")
            # the sites NVFlare started the job with against the job's and the data root's (protocol/topology.py)
            check_job_sites(COORDINATOR, sites, self.cfg.sites, self.min_sites, data_root)
            # HE: the coordinator's public context (no secret key); a missing or wrong one fails the job here
            server_he = workspace_context(fl_ctx, "server") if self.cfg.he else None
            if self.cfg.he and self.cfg.label_owner != SERVER:  # HE keys by role (privacy/he_keys.py)
                net.exchange_he_keys(self.cfg.label_owner)
            cfg = self.cfg
            recorded = RecordingTransport(net) if self.record_messages else net
            # the training run's own model ID (the simulator calls every job simulate_job): model_ids.py
            server_runs = runs_root(data_root, SERVER)
            model_id = new_model_id(self._job_name(run_dir, fl_ctx), cfg.algorithm, [server_runs])
            results = run_algorithm(
                recorded,
                cfg,
                lambda: load_label_tables(SERVER, job_data_request(sites, data_root, cfg)),
                tracker,
                he_context=server_he,
                runs_root=server_runs,
                run_id=run_id,
                job_id=fl_ctx.get_job_id(),
                model_id=model_id,
                private=PrivateRandomness.from_environment("label", local_private_seed(fl_ctx, SERVER)),
                enforce=local_enforcement(fl_ctx, SERVER),
            )
        except Exception as error:  # any failure ends the job with the reason in the result file
            tracker.close()
            message = f"{type(error).__name__}: {error}"
            DETAILS.error(f"vflflare job failed: {message}\n{traceback.format_exc()}")  # the table below says it
            record = failed(self.cfg.algorithm, sites, message, getattr(error, "site", None), net.ledger)
            record["vflflare"] = code_identity(SERVER)
            if run_id:
                record["run_id"] = run_id
            path = self._write(run_dir, record)
            DETAILS.error(f"results written to {path}")
            print(format_table(record), flush=True)  # once, on the console of whoever runs the server
            net.close()
            self.system_panic(
                f"vflflare: the job failed in phase {net.ledger.current!r}; its results table says why", fl_ctx
            )
            return
        tracker.close()
        net.close()
        if self.record_messages:
            results["messages"] = os.path.basename(
                save_messages(os.path.join(run_dir, MESSAGES_FILE), recorded.messages)
            )
        results = completed({**results, "vflflare": code_identity(SERVER)})  # the release and code the server runs
        if fl_ctx.get_job_id() == SIMULATOR_JOB_ID:  # where the printed scoring command points (results.py)
            results["environment"] = {"kind": "simulator", "data_root": data_root}
        self._keep_predictions(run_dir, results)
        path = self._write(run_dir, results)
        DETAILS.info(f"results written to {path}")
        print(format_table(results), flush=True)  # once, on the console of whoever runs the server

    def _job_name(self, run_dir: str, fl_ctx: FLContext) -> str:
        """The job's name (its meta.json "name", e.g. oneshot_vfl), else the algorithm's."""
        meta = fl_ctx.get_prop(FLContextKey.JOB_META)
        if not isinstance(meta, dict):
            try:
                with open(os.path.join(run_dir, "meta.json")) as f:
                    meta = json.load(f)
            except (OSError, ValueError):
                meta = {}
        name = meta.get("name") if isinstance(meta, dict) else None
        return str(name or self.cfg.algorithm)

    @staticmethod
    def _keep_predictions(run_dir: str, results: dict) -> None:
        """A scoring job whose label party ran here: a copy of its predictions in the job's run folder, so
        `download_job` (and submit_job.py) bring them to the analyst. With the labels at a site they stay at
        that site: its file pairs its row IDs with its model's scores, which the coordinator never held."""
        scored = results.get("training", {})
        if scored.get("label_owner") != SERVER or not os.path.isfile(scored.get("predictions", "")):
            return
        kept = os.path.join(run_dir, os.path.basename(scored["predictions"]))
        shutil.copyfile(scored["predictions"], kept)
        scored["predictions_in_job"] = os.path.basename(kept)
        sidecar = os.path.splitext(scored["predictions"])[0] + ".json"  # which model, which rows, when
        if os.path.isfile(sidecar):
            shutil.copyfile(sidecar, os.path.join(run_dir, os.path.basename(sidecar)))

    @staticmethod
    def _write(run_dir: str, results: dict) -> str:
        os.makedirs(run_dir, exist_ok=True)
        path = os.path.join(run_dir, RESULTS_FILE)
        with open(path, "w") as f:
            json.dump(results, f, indent=2)
        return path
