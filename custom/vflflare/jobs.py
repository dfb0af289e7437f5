"""Job folders are generated, never hand-edited: `vflflare jobs` writes jobs/, a test checks it matches."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vflflare.algorithms import secure_aggregation
from vflflare.algorithms.site_runtime import LABEL_METHODS, LABEL_PREFIX
from vflflare.config import VFLConfig
from vflflare.flare import he_filters
from vflflare.flare.tracking import TRACKING_EVENTS

# Tasks a site executes (aux-only steps such as 'split' never arrive as tasks).
SITE_TASKS = [
    "setup", "align", "psi_labels", "represent", "oneshot_update", "fewshot_update", "contrastive_pretrain"
] + [
    LABEL_PREFIX + m for m, channel in LABEL_METHODS.items() if channel == "exchange"
]

# NVFlare admits a job's components only from its allow-list or when the job brings its own code
# (an app/custom folder, checked against the submitter's BYOC right). vflflare is such code.
CUSTOM_NOTE = """This job runs vflflare's own code (custom/vflflare in the repository).
The simulator and a POC on this machine import it from the installed package; to deploy on sites
that do not have it installed, copy the package here (poc/ and provisioning/ do that).
NVFlare treats a job with an app/custom folder as bring-your-own-code: the submitter needs that right.
"""

TASK_REQUEST_INTERVAL_S = 0.2

# The jobs shipped in jobs/: name -> VFLConfig overrides.
DEFAULT_JOBS: dict[str, dict[str, Any]] = {
    "vanilla_vfl": {"algorithm": "vanilla"},
    "oneshot_vfl": {"algorithm": "oneshot"},
    "fewshot_vfl": {"algorithm": "fewshot"},
    "ssvfl_i": {"algorithm": "ssvfl_i"},
    "ssvfl_c": {"algorithm": "ssvfl_c"},
}
# jobs/psi: NVFlare's DH-PSI over the sites' IDs, output for later jobs with alignment "psi"
PSI_JOB = "psi"


def job_files(name: str, overrides: dict[str, Any], min_sites: int = 2, psi: bool = False) -> dict[str, dict]:
    """psi: run NVFlare's DH-PSI workflow first, and align the VFL phases on its result."""
    if psi:
        if overrides.get("alignment", "psi") != "psi":
            raise ValueError(f"a job with a PSI phase aligns with it: alignment must be 'psi', not {overrides['alignment']!r}")
        overrides = {**overrides, "alignment": "psi"}
    cfg = VFLConfig.from_dict(overrides)  # fails early on a misspelt key
    config = {k: v for k, v in cfg.to_dict().items() if k in overrides or k == "algorithm"}
    server = {
        "format_version": 2,
        # sites idle between phases poll for the next task this often (NVFlare's default is 2 s,
        # which would dominate a one-shot job's wall time)
        "server": {"task_request_interval": TASK_REQUEST_INTERVAL_S},
        "workflows": [
            {
                "id": "vfl_controller",
                "path": "vflflare.flare.controller.VFLController",
                "args": {"config": config, "min_sites": min_sites},
            }
        ],
        "components": [
            {
                "id": "tb_receiver",
                "path": "nvflare.app_opt.tracking.tb.tb_receiver.TBAnalyticsReceiver",
                "args": {"events": TRACKING_EVENTS},
            }
        ],
    }
    tasks = secure_aggregation.SITE_TASKS if cfg.algorithm == "secure_sum" else SITE_TASKS
    client = {
        "format_version": 2,
        "executors": [{"tasks": tasks, "executor": {"path": "vflflare.flare.executor.VFLExecutor", "args": {}}}],
        "components": [],
    }
    if cfg.he:  # CKKS on every task's data and result at the sites (aux steps: in the executor)
        client.update(he_filters.client_filters(tasks))
    if psi:
        _prepend_psi(server, client, min_sites, cfg.seed)
    meta = {"name": name, "resource_spec": {}, "deploy_map": {"app": ["@ALL"]}, "min_clients": min_sites}
    return {
        "meta.json": meta,
        "app/config/config_fed_server.json": server,
        "app/config/config_fed_client.json": client,
    }


def _prepend_psi(server: dict, client: dict, min_sites: int, seed: int) -> None:
    from vflflare.flare.psi import psi_client_components, psi_client_executor, psi_server_workflow

    server["workflows"].insert(0, psi_server_workflow(min_sites))
    client["executors"].insert(0, psi_client_executor())
    client["components"] = psi_client_components(seed) + client["components"]


def psi_job_files(name: str = PSI_JOB, min_sites: int = 2) -> dict[str, dict]:
    """NVFlare's DH-PSI workflow alone; each site stores the intersection for later VFL jobs."""
    server = {"format_version": 2, "server": {"task_request_interval": TASK_REQUEST_INTERVAL_S},
              "workflows": [], "components": []}
    client = {"format_version": 2, "executors": [], "components": []}
    _prepend_psi(server, client, min_sites, 0)
    meta = {"name": name, "resource_spec": {}, "deploy_map": {"app": ["@ALL"]}, "min_clients": min_sites}
    return {
        "meta.json": meta,
        "app/config/config_fed_server.json": server,
        "app/config/config_fed_client.json": client,
    }


def write_job(out_dir: str | Path, name: str, overrides: dict[str, Any], min_sites: int = 2, psi: bool = False) -> Path:
    return _write_files(out_dir, name, job_files(name, overrides, min_sites, psi))


def write_psi_job(out_dir: str | Path, name: str = PSI_JOB, min_sites: int = 2) -> Path:
    return _write_files(out_dir, name, psi_job_files(name, min_sites))


def _write_files(out_dir: str | Path, name: str, files: dict[str, dict]) -> Path:
    root = Path(out_dir) / name
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content, indent=2) + "\n")
    (root / "app" / "custom").mkdir(parents=True, exist_ok=True)
    (root / "app" / "custom" / "README.txt").write_text(CUSTOM_NOTE)
    return root


def write_default_jobs(out_dir: str | Path) -> list[Path]:
    return [write_job(out_dir, name, overrides) for name, overrides in DEFAULT_JOBS.items()] + [write_psi_job(out_dir)]

