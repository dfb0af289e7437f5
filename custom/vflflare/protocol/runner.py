"""Run one algorithm plug-in end to end on any Transport and produce the job's result record."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from vflflare.config import SERVER, JobConfig
from vflflare.data.types import LabelTables
from vflflare.privacy.enforcement import Enforcement, apply_enforcement
from vflflare.privacy.private_randomness import PrivateRandomness
from vflflare.protocol.checkpoint import CheckpointedTransport, Journal
from vflflare.protocol.going_alone import GOING_ALONE
from vflflare.protocol.label_party import LabelParty
from vflflare.protocol.model_store import save_label_party
from vflflare.protocol.setup import SetupInputs
from vflflare.protocol.transport import Transport
from vflflare.registry import get_algorithm
from vflflare.tracking import Tracker


def run_algorithm(
    net: Transport,
    cfg: JobConfig,
    load_server_labels: Callable[[], LabelTables],
    tracker: Tracker,
    *,
    he_context: Any = None,
    runs_root: str | None = None,
    run_id: str | None = None,
    job_id: str | None = None,
    private: PrivateRandomness | None = None,
    enforce: Enforcement | None = None,
    model_id: str | None = None,
    data_root: str | None = None,
) -> dict:
    """he_context: the coordinator's public CKKS context when cfg.he (it can add, never decrypt).
    runs_root, run_id: where the coordinator journals a run with cfg.checkpoint, and its id (default:
    a fresh one); cfg.resume names the run to go on with.
    job_id: with runs_root, a label party at the coordinator saves its head there at the end (model_store.py).
    model_id: the ID every party saves this run's model under (model_ids.py; sent to the sites with setup);
    default: job_id.
    data_root: the coordinator's data root, for a plug-in that reads a file of its own there (scoring's IDs).
    private: the coordinator's private source (privacy/private_randomness.py), for a label party hosted there.
    enforce: the defenses the server's local configuration enforces on a label party hosted there
    (privacy/enforcement.py)."""
    if len(net.sites) < 2:
        raise ValueError(f"vertical FL needs at least 2 sites, got {net.sites}")
    resumable = None
    if cfg.checkpoint or cfg.resume:
        if runs_root is None:
            raise ValueError("checkpoint/resume needs a place for the run's journal (the coordinator's workspace)")
        run_id = cfg.resume or run_id or uuid.uuid4().hex[:12]
        net = resumable = CheckpointedTransport(net, Journal(runs_root, run_id, cfg.to_dict(), bool(cfg.resume)))
        tracker.info(f"run id {run_id}: checkpoints under {runs_root}; go on after a failure with resume: {run_id}")
    plugin = get_algorithm(cfg.algorithm, cfg.plugins)
    setup = plugin.setup
    # a label party at the coordinator runs with the stricter of the job's defenses and the server's own
    label_cfg, enforced = (
        apply_enforcement(cfg, enforce, hosts_label=setup.hosts_label(cfg, SERVER), hosts_site=False)
        if setup.holds_data
        else (cfg, {})
    )
    enforced = {SERVER: enforced} if enforced else {}
    model_id = (model_id or job_id) if job_id is not None else None  # nothing is saved without a job id
    label, rows, alignment = setup.coordinator(
        SetupInputs(net, cfg, plugin.Label, load_server_labels, tracker, private, label_cfg, model_id)
    )
    flow = plugin(cfg, tracker, he_context)
    flow.runs_root, flow.job_id, flow.data_root = runs_root, job_id, data_root
    if resumable is not None:
        resumable.start()
    metrics = flow.run(net, label, rows)
    resume = {"run_id": run_id, "replayed_exchanges": resumable.replayed} if resumable is not None else {}
    saved = {}
    if job_id is not None:
        saved["job_id"] = job_id
        if setup.saves_model:  # a model to score with, named by its model ID
            saved["model_id"] = model_id
        if runs_root is not None and isinstance(label, LabelParty):
            head = save_label_party(runs_root, model_id, label, job_id, cfg)
            if head is not None:
                saved["label_model"] = str(head)
    classes = getattr(label, "classes", None) or getattr(getattr(label, "tables", None), "classes", None)
    return {
        **resume,
        **saved,
        "algorithm": cfg.algorithm,
        "seed": cfg.seed,
        "sites": list(net.sites),
        # a scoring job's: where its predictions went (the saved model's label party), whatever the job says
        "label_owner": flow.info.get("label_owner", cfg.label_owner),
        **({"classes": list(classes)} if classes else {}),
        "metrics": {k: float(v) for k, v in metrics.items()},
        **({GOING_ALONE: flow.info.pop(GOING_ALONE)} if GOING_ALONE in flow.info else {}),
        "rows": rows,
        "alignment": alignment,
        "training": flow.info,
        "communication": net.ledger.summary(),
        "expected_communication": flow.expected_communications(list(net.sites), rows),
        "phases": net.ledger.phases,
        "step_latency": net.ledger.step_latency(),
        "wall_s": net.ledger.wall_s(),
        "config": cfg.to_dict(),
        "defenses": cfg.defenses(),  # the label DP epsilon spent among them
        **privacy_record(cfg, label, alignment, {**enforced, **getattr(flow, "enforced", {})}),
    }


def privacy_record(cfg: JobConfig, label: Any, alignment: dict, enforced: dict | None = None) -> dict:
    """With a defense on (the job's, or one a party's local configuration enforced): which kind of private
    source each party drew its defense from (never a value), the label party's DP accounting (with the values
    it used) and, only where a party's local configuration changed a defense, what and by whom ("enforced")."""
    sources = alignment.pop("private_randomness", {})
    enforced = {**alignment.pop("enforced", {}), **(enforced or {})}
    if not cfg.defended and not enforced:
        return {}
    if isinstance(label, LabelParty) and label.cfg.defended:
        sources = {SERVER: label.private.source, **sources}
    dp = label.privacy_account() if label is not None else {}
    return {
        "privacy": {
            "private_randomness": sources,
            **({"dp": dp} if dp else {}),
            **({"enforced": enforced} if enforced else {}),
        }
    }
