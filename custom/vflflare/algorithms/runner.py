"""Run one algorithm end to end on any Transport and produce the job's result record."""
from __future__ import annotations

from typing import Callable

from vflflare.algorithms.fewshot import FewShotVFL
from vflflare.algorithms.oneshot import OneShotVFL
from vflflare.algorithms.setup_phase import setup_parties
from vflflare.algorithms.ssvfl import SSVFLC, SSVFLI
from vflflare.algorithms.transport import Transport
from vflflare.algorithms.vanilla import VanillaVFL
from vflflare.config import VFLConfig
from vflflare.data.types import LabelTables
from vflflare.tracking import Tracker

# FedBCD is vanilla VFL with cfg.local_steps = Q > 1
ALGORITHMS = {
    "vanilla": VanillaVFL,
    "fedbcd": VanillaVFL,
    "oneshot": OneShotVFL,
    "fewshot": FewShotVFL,
    "ssvfl_i": SSVFLI,  # self-supervised VFL (Castiglia et al.), Alg. 1
    "ssvfl_c": SSVFLC,  # Alg. 2
}


def run_algorithm(
    net: Transport, cfg: VFLConfig, load_server_labels: Callable[[], LabelTables], tracker: Tracker
) -> dict:
    if cfg.algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm '{cfg.algorithm}'; choose one of {sorted(ALGORITHMS)}")
    if len(net.sites) < 2:
        raise ValueError(f"vertical FL needs at least 2 sites, got {net.sites}")
    label, rows = setup_parties(net, cfg, load_server_labels, tracker)
    flow = ALGORITHMS[cfg.algorithm](cfg, tracker)
    metrics = flow.run(net, label, rows["aligned_train"])
    return {
        "algorithm": cfg.algorithm,
        "seed": cfg.seed,
        "sites": list(net.sites),
        "label_owner": cfg.label_owner,
        "metrics": {k: float(v) for k, v in metrics.items()},
        "rows": rows,
        "training": flow.info,
        "communication": net.ledger.summary(),
        "phases": net.ledger.phases,
        "step_latency": net.ledger.step_latency(),
        "wall_s": net.ledger.wall_s(),
        "config": cfg.to_dict(),
    }
