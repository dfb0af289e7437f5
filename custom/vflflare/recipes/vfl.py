"""`VFLRecipe`: any vflflare algorithm as an NVFlare job, in the shape of NVFlare's own recipes
(`nvflare.app_common.psi.recipes.dh_psi.DhPSIRecipe`, `XGBVerticalRecipe`): the constructor builds a
FedJob, and `execute(SimEnv | PocEnv | ProdEnv)` or `export(dir)` come from nvflare.recipe.Recipe.

    recipe = VFLRecipe(algorithm="oneshot", min_clients=2, config={"ssl_epochs": 5})
    run = recipe.execute(SimEnv(num_clients=2))
    VFLRecipe(algorithm="oneshot", sites=["bank-a", "bank-b", "bank-c"])  # exactly these three sites

A job knows its sites: at least min_clients, exactly `sites` where given (the controller's min_sites and
config "sites"); the coordinator fails the job naming any missing or extra site (protocol/topology.py).
meta.json's min_clients stays 2 whatever the job expects: NVFlare would not start a job while fewer
sites than that are connected, and would say so nowhere but in the job's schedule history.

The job carries no code: every party runs the vflflare it installed. Its app/custom folder holds only a
note (CUSTOM_NOTE), which makes NVFlare's simulator and POC treat it as bring-your-own-code, so their
component allow list, which does not name vflflare, is skipped. A provisioned deployment's kits name
vflflare's components on their allow list (`ComponentAllowListBuilder`) and refuse code (`byoc: none`):
`execute(ProdEnv(...))` leaves the note out, and `provisioning/submit_job.py` submits an exported job
without it (`vflflare.staging.without_code_note`).
`bundle_code=True` puts the package into app/custom instead (sites without vflflare installed; only a
party granting the `byoc` right runs it). Plug-ins outside vflflare travel as files in app/custom
(`plugin_files`) and are imported by module name (`config["plugins"]`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from nvflare.apis.job_def import ALL_SITES, SERVER_SITE_NAME
from nvflare.app_opt.tracking.tb.tb_receiver import TBAnalyticsReceiver
from nvflare.job_config.api import FedJob
from nvflare.job_config.defs import FilterType
from nvflare.recipe.prod_env import ProdEnv
from nvflare.recipe.spec import ExecEnv, Recipe

from vflflare.config import SERVER
from vflflare.flare.analytics import TRACKING_EVENTS
from vflflare.flare.controller import VFLController
from vflflare.flare.executor import VFLExecutor
from vflflare.flare.he_filters import DecryptTaskData, EncryptTaskResult
from vflflare.flare.simulator_fix import serialise_client_starts
from vflflare.privacy.he_keys import KEY_TASKS
from vflflare.protocol.topology import check_unique
from vflflare.registry import get_algorithm, make_config
from vflflare.staging import CUSTOM_NOTE, CUSTOM_NOTE_FILE, package_folder

# sites idle between phases poll for the next task this often (NVFlare's default is 2 s, which would
# dominate the wall time of a job with few phases)
TASK_REQUEST_INTERVAL_S = 0.2
MIN_SITES = 2  # vertical FL's minimum, and meta.json's min_clients (see expected_count)


def _new_job(name: str, bundle_code: bool) -> FedJob:
    # NVFlare starts the job with the sites connected once MIN_SITES are; the controllers check the rest
    job = FedJob(name=name, min_clients=MIN_SITES)
    if not bundle_code:
        job.set_app_packages(["vflflare"])  # the sites import the installed package
    return job


def _add_psi(
    job: FedJob,
    min_clients: int,
    seed: int,
    id_normalize: list[str] | None,
    score: Any = None,
    sites: list[str] | None = None,
) -> None:
    """NVFlare's DH-PSI workflow over the sites' IDs, each site storing its intersection for the VFL
    phases (or later jobs) to align on. With `score` (a scoring job's config), over the IDs of each site's
    file of new rows instead, kept in the job."""
    from vflflare.flare.psi import (
        LOCAL_PSI_ID,
        PSI_ALGO_ID,
        PSI_TASK,
        PSI_WRITER_ID,
        ExactDhPSITaskHandler,
        InJobPSIWriter,
        ScoreFilePSI,
        VFLPSIController,
        VFLPSIExecutor,
        VFLPSIWriter,
        VFLSitePSI,
    )

    job.to_server(VFLPSIController(min_sites=min_clients, sites=sites), id="psi_controller")
    job.to_clients(VFLPSIExecutor(psi_algo_id=PSI_ALGO_ID), id="psi_executor", tasks=[PSI_TASK])
    job.to_clients(ExactDhPSITaskHandler(local_psi_id=LOCAL_PSI_ID), id=PSI_ALGO_ID)
    if score is None:
        job.to_clients(VFLSitePSI(psi_writer_id=PSI_WRITER_ID, seed=seed, id_normalize=id_normalize), id=LOCAL_PSI_ID)
        job.to_clients(VFLPSIWriter(), id=PSI_WRITER_ID)
    else:
        job.to_clients(
            ScoreFilePSI(psi_writer_id=PSI_WRITER_ID, model_job=score.model_job, score_file=score.score_file),
            id=LOCAL_PSI_ID,
        )
        job.to_clients(InJobPSIWriter(), id=PSI_WRITER_ID)


def expected_count(min_clients: int | None, sites: list[str] | None) -> int:
    """How many sites the job needs: len(sites) when it names them (names unique), else min_clients, else 2."""
    if sites:
        check_unique(sites, "the recipe's sites")
        if min_clients is not None and min_clients != len(sites):
            raise ValueError(f"min_clients={min_clients} but the job names {len(sites)} sites {list(sites)}")
        min_clients = len(sites)
    min_clients = MIN_SITES if min_clients is None else min_clients
    if min_clients < MIN_SITES:
        raise ValueError(
            f"vertical FL needs at least {MIN_SITES} sites, got min_clients={min_clients}"
            + (f" (sites {list(sites)})" if sites else "")
        )
    return min_clients


class _VFLJobRecipe(Recipe):
    def __init__(self, job: FedJob, bundle_code: bool, sites: list[str] | None) -> None:
        super().__init__(job)
        self.sites = list(sites) if sites else None
        self.add_server_config({"server": {"task_request_interval": TASK_REQUEST_INTERVAL_S}})
        self._code_note = not bundle_code  # added when the job goes anywhere but to ProdEnv
        if bundle_code:
            code = str(package_folder())
            self._job.to_server(code)
            self._job.to_clients(code)

    def _add_code_note(self) -> None:
        if self._code_note:
            self._code_note = False
            # a file outside any package on sys.path lands at the top of app/custom
            note = Path(tempfile.mkdtemp(prefix="vflflare-job-")) / CUSTOM_NOTE_FILE
            note.write_text(CUSTOM_NOTE)
            self.add_server_file(str(note))
            self.add_client_file(str(note))

    def process_env(self, env: ExecEnv) -> None:
        if isinstance(env, ProdEnv):
            if not self.sites:  # every connected site of the project would take part
                raise ValueError(
                    "a job for a provisioned deployment names its sites (sites=[...], job.py --sites "
                    "a,b): its parties are explicit, so that no other site of the project takes part"
                )
            # NVFlare deploys the job to the server and these sites alone, not to every connected site
            self._job._set_all_apps()
            deploy_map = self._job.job.deploy_map
            app = deploy_map.pop(ALL_SITES)
            for party in (SERVER_SITE_NAME, *self.sites):
                deploy_map[party] = app
        else:  # a provisioned deployment names vflflare on its allow list; the simulator and a POC do not
            self._add_code_note()

    def execute(self, env: ExecEnv, server_exec_params: dict | None = None, client_exec_params: dict | None = None):
        serialise_client_starts()  # SimEnv runs NVFlare's simulator in this process (flare/simulator_fix.py)
        return super().execute(env, server_exec_params, client_exec_params)

    def export(
        self,
        job_dir: str,
        server_exec_params: dict | None = None,
        client_exec_params: dict | None = None,
        env: ExecEnv | None = None,
    ):
        if env is None:  # a job folder for `nvflare simulator` or `vflflare simulate`
            self._add_code_note()
        return super().export(job_dir, server_exec_params, client_exec_params, env)


class VFLRecipe(_VFLJobRecipe):
    """One vflflare algorithm as a job.

    Args:
        algorithm: the name of a registered plug-in (vflflare.registry.algorithms(), or one a
            module in config["plugins"] registers).
        min_clients: K >= 2 feature sites: at least this many must take part (default: len(sites), else 2).
        sites: the job's sites by name (unique, at least 2): exactly these must take part, or the job fails
            naming the missing or extra ones; sets min_clients.
        config: the algorithm's settings (vflflare.config and its plug-in's Config), validated here.
        label_owner: "server" (the coordinator holds the labels) or a site name.
        he: CKKS-encrypt every float tensor the sites send (needs keys in the startup kits).
        alignment: "hash" (salted ID digests) or "psi" (an earlier PSI job's intersection).
        psi: run NVFlare's DH-PSI first in the same job and align on it (implies alignment "psi").
        name: the job name (default "<algorithm>_vfl").
        plugin_files: Python files of plug-ins outside vflflare, put into the job's app/custom.
        bundle_code: put the vflflare package into the job's app/custom.
        mlflow_uri: also stream every curve (the TensorBoard scalars of each site and the coordinator) to
            MLflow through NVFlare's MLflowReceiver: a tracking URI (http://..., file:..., sqlite:...), or ""
            for an SQLite store in the job's result folder on the server. None: TensorBoard only.
        record_messages: the coordinator keeps every message it relays in the server's run folder
            (vflflare_messages.pt), for `vflflare attack --env sim`; for audits of test runs only.
    """

    def __init__(
        self,
        *,
        algorithm: str,
        min_clients: int | None = None,
        sites: list[str] | None = None,
        config: dict[str, Any] | None = None,
        label_owner: str = SERVER,
        he: bool = False,
        alignment: str = "hash",
        psi: bool = False,
        name: str | None = None,
        plugin_files: list[str] | None = None,
        bundle_code: bool = False,
        mlflow_uri: str | None = None,
        record_messages: bool = False,
    ) -> None:
        min_clients = expected_count(min_clients, sites)
        settings = {**(config or {}), "algorithm": algorithm, **({"sites": list(sites)} if sites else {})}
        for key, value, default in (
            ("label_owner", label_owner, SERVER),
            ("he", he, False),
            ("alignment", "psi" if psi else alignment, "hash"),
        ):
            if value != default:
                settings[key] = value
        cfg = make_config(settings)  # an unknown key or bad value fails here, naming the algorithm
        plugin = get_algorithm(cfg.algorithm, cfg.plugins)
        self.config, self.min_clients = settings, min_clients
        job = _new_job(name or f"{algorithm}_vfl", bundle_code)
        if psi:
            _add_psi(
                job,
                min_clients,
                cfg.seed,
                cfg.id_normalize or None,
                score=cfg if plugin.setup.psi_items == "score_file" else None,
                sites=cfg.sites or None,
            )
        job.to_server(
            VFLController(config=settings, min_sites=min_clients, record_messages=record_messages), id="vfl_controller"
        )
        job.to_server(TBAnalyticsReceiver(events=TRACKING_EVENTS), id="tb_receiver")
        if mlflow_uri is not None:  # the same curves, streamed by NVFlare's own MLflow receiver
            from nvflare.app_opt.tracking.mlflow.mlflow_receiver import MLflowReceiver

            job.to_server(
                MLflowReceiver(
                    tracking_uri=mlflow_uri or None,
                    events=TRACKING_EVENTS,
                    kw_args={"experiment_name": f"vflflare {algorithm}", "run_name": name or f"{algorithm}_vfl"},
                ),
                id="mlflow_receiver",
            )
        tasks = plugin.site_tasks()
        if cfg.he and cfg.label_owner != SERVER:  # each site's own key pair for the job (privacy/he_keys.py)
            tasks = [*tasks, *KEY_TASKS]
        job.to_clients(VFLExecutor(), id="vfl_executor", tasks=tasks)
        if cfg.he:  # CKKS on every task's data and result at the sites (aux steps: in the executor)
            job.to_clients(DecryptTaskData(), filter_type=FilterType.TASK_DATA, tasks=tasks)
            job.to_clients(EncryptTaskResult(), filter_type=FilterType.TASK_RESULT, tasks=tasks)
        for path in plugin_files or []:
            job.to_server(str(path))
            job.to_clients(str(path))
        super().__init__(job, bundle_code, sites)


class PSIRecipe(_VFLJobRecipe):
    """NVFlare's DH-PSI alone; each site stores the intersection for later jobs with alignment "psi".
    id_normalize: the ID normalisation those jobs set (the PSI must match IDs the same way)."""

    def __init__(
        self,
        *,
        min_clients: int | None = None,
        name: str = "psi",
        bundle_code: bool = False,
        id_normalize: list[str] | None = None,
        sites: list[str] | None = None,
    ) -> None:
        min_clients = expected_count(min_clients, sites)
        job = _new_job(name, bundle_code)
        _add_psi(job, min_clients, 0, id_normalize, sites=list(sites) if sites else None)
        super().__init__(job, bundle_code, sites)
