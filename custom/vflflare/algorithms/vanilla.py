"""Vanilla VFL (split NN on the aligned labeled rows) and FedBCD (Liu et al.: Q local steps on stale
gradients, set cfg.local_steps = Q)."""
from __future__ import annotations

from typing import Any

from vflflare.algorithms.split_training import train_split_nn
from vflflare.algorithms.transport import Transport
from vflflare.config import VFLConfig
from vflflare.tracking import Tracker


class VanillaVFL:
    def __init__(self, cfg: VFLConfig, tracker: Tracker) -> None:
        self.cfg, self.tracker = cfg, tracker
        self.info: dict[str, Any] = {}

    def run(self, net: Transport, label: Any, n_aligned: int) -> dict[str, float]:
        return train_split_nn(net, label, self.cfg, n_aligned, self.cfg.split_epochs, False, self.tracker, self.info)
