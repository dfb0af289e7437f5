"""What the coordinator does in a job (VFLController's run, flare/controller.py): the algorithm's phases over
NVFlare's tasks, with the label party when it is here, and vflflare_results.json in the run folder.

NVFlare imports this module on its run thread, when the job starts (VFLController.start_controller), not while
it builds the job's components: it pulls in torch and the algorithm's code."""

from __future__ import annotations

import json
import os
import shutil
import traceback
import uuid
from typing import TYPE_CHECKING, Any

from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.signal import Signal

from vflflare.code_identity import code_identity
from vflflare.config import SERVER, JobConfig
from vflflare.data.loading import load_label_tables
from vflflare.flare.analytics import FlareTracker
from vflflare.flare.he_filters import workspace_context
from vflflare.flare.site_config import local_enforcement, local_private_seed, resolve_party_data_root
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

if TYPE_CHECKING:
    from vflflare.flare.controller import VFLController


def prepare(config: dict[str, Any]) -> JobConfig:
    """The job's validated config; torch set up for it, its one-off imports started in the background (a label
    party here also imports what scoring uses) while the sites start."""
    cfg = make_config(config)
    prepare_torch(
        cfg.num_threads, warm_in_background=True, also_import=LAZY_IMPORTS if cfg.label_owner == SERVER else ()
    )
    return cfg


def coordinate(controller: VFLController, abort_signal: Signal, fl_ctx: FLContext) -> None:
    """The job on the coordinator: the algorithm's phases over NVFlare's tasks, then vflflare_results.json in the
    run folder (and on the console), whether it completed or failed."""
    cfg = controller.cfg
    engine = fl_ctx.get_engine()
    sites = sorted(c.name for c in engine.get_clients())
    run_dir = engine.get_workspace().get_run_dir(fl_ctx.get_job_id())
    net = FlareTransport(
        controller,
        fl_ctx,
        abort_signal,
        sites,
        cfg.wire_dtype,
        controller.task_timeout,
        controller.step_timeout,
        he=cfg.he,
        health=controller.health,
        stall_timeout=cfg.stall_timeout,
        join_timeout=cfg.join_timeout,
    )
    net.ledger.on_phase = lambda name: controller.log_info(fl_ctx, f"vflflare phase '{name}' started")
    tracker = FlareTracker(controller, fl_ctx, on_site=False)
    # the id to resume this run by (a checkpointed run); resuming keeps the id of the run it goes on with
    run_id = (cfg.resume or uuid.uuid4().hex[:12]) if cfg.checkpoint or cfg.resume else None
    try:
        data_root = resolve_party_data_root(controller.data_root, fl_ctx, SERVER)
        DETAILS.info(f"label party 'server': data root: {data_root or '<embedded default>'}")
        # the sites NVFlare started the job with against the job's and the data root's (protocol/topology.py)
        check_job_sites(COORDINATOR, sites, cfg.sites, controller.min_sites, data_root)
        # HE: the coordinator's public context (no secret key); a missing or wrong one fails the job here
        server_he = workspace_context(fl_ctx, "server") if cfg.he else None
        if cfg.he and cfg.label_owner != SERVER:  # HE keys by role (privacy/he_keys.py)
            net.exchange_he_keys(cfg.label_owner)
        recorded = RecordingTransport(net) if controller.record_messages else net
        # the training run's own model ID (the simulator calls every job simulate_job): model_ids.py
        server_runs = runs_root(data_root, SERVER)
        model_id = new_model_id(_job_name(cfg, run_dir, fl_ctx), cfg.algorithm, [server_runs])
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
            data_root=data_root,
        )
        if "model_id" in results:  # on disk at every site before NVFlare reports the job finished
            net.save_models()
    except Exception as error:  # any failure ends the job with the reason in the result file
        tracker.close()
        message = f"{type(error).__name__}: {error}"
        DETAILS.error(f"vflflare job failed: {message}\n{traceback.format_exc()}")  # the table below says it
        record = failed(cfg.algorithm, sites, message, getattr(error, "site", None), net.ledger)
        record["vflflare"] = code_identity(SERVER)
        if run_id:
            record["run_id"] = run_id
        path = _write(run_dir, record)
        DETAILS.error(f"results written to {path}")
        print(format_table(record), flush=True)  # once, on the console of whoever runs the server
        net.close()
        controller.system_panic(
            f"vflflare: the job failed in phase {net.ledger.current!r}; its results table says why", fl_ctx
        )
        return
    tracker.close()
    net.close()
    if controller.record_messages:
        results["messages"] = os.path.basename(save_messages(os.path.join(run_dir, MESSAGES_FILE), recorded.messages))
    results = completed({**results, "vflflare": code_identity(SERVER)})  # the release and code the server runs
    if fl_ctx.get_job_id() == SIMULATOR_JOB_ID:  # where the printed scoring command points (results.py)
        results["environment"] = {"kind": "simulator", "data_root": data_root}
    _keep_predictions(run_dir, results)
    path = _write(run_dir, results)
    DETAILS.info(f"results written to {path}")
    print(format_table(results), flush=True)  # once, on the console of whoever runs the server


def _job_name(cfg: JobConfig, run_dir: str, fl_ctx: FLContext) -> str:
    """The job's name (its meta.json "name", e.g. oneshot_vfl), else the algorithm's."""
    meta = fl_ctx.get_prop(FLContextKey.JOB_META)
    if not isinstance(meta, dict):
        try:
            with open(os.path.join(run_dir, "meta.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            meta = {}
    name = meta.get("name") if isinstance(meta, dict) else None
    return str(name or cfg.algorithm)


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


def _write(run_dir: str, results: dict) -> str:
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, RESULTS_FILE)
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    return path
