"""Run one algorithm plug-in end to end on any Transport and produce the job's result record."""
from __future__ import annotations

from typing import Any, Callable

from vflflare.algorithms.registry import get_algorithm
from vflflare.config import JobConfig
from vflflare.data.types import LabelTables
from vflflare.protocol.setup import setup_parties
from vflflare.protocol.transport import Transport
from vflflare.tracking import Tracker


def run_algorithm(
    net: Transport, cfg: JobConfig, load_server_labels: Callable[[], LabelTables], tracker: Tracker,
    he_context: Any = None,
) -> dict:
    """he_context: the coordinator's public CKKS context when cfg.he (it can add, never decrypt)."""
    if len(net.sites) < 2:
        raise ValueError(f"vertical FL needs at least 2 sites, got {net.sites}")
    plugin = get_algorithm(cfg.algorithm, cfg.plugins)
    label, rows, alignment = (setup_parties(net, cfg, plugin, load_server_labels, tracker) if plugin.needs_data
                              else (None, {}, {}))
    flow = plugin(cfg, tracker, he_context)
    metrics = flow.run(net, label, rows)
    return {
        "algorithm": cfg.algorithm,
        "seed": cfg.seed,
        "sites": list(net.sites),
        "label_owner": cfg.label_owner,
        "metrics": {k: float(v) for k, v in metrics.items()},
        "rows": rows,
        "alignment": alignment,
        "training": flow.info,
        "communication": net.ledger.summary(),
        "expected_communication": flow.expected_communications(list(net.sites), rows),
        "phases": net.ledger.phases,
        "step_latency": net.ledger.step_latency(),
        "wall_s": net.ledger.wall_s(),
        "config": cfg.to_dict(),
    }
