"""One-shot VFL (Sun et al. 2023, Alg. 1): two uploads and one download per site."""
from __future__ import annotations

from typing import Any

from vflflare.algorithms.split_training import reps_of
from vflflare.algorithms.transport import Transport
from vflflare.config import VFLConfig
from vflflare.tracking import Tracker

FINAL_PARTS = ["aligned", "val", "test"]


def upload_aligned_representations(net: Transport) -> dict:
    """Alg. 1 lines 2-4, (1) in Fig. 2: H_o^k = f_k(X_o^k) up."""
    with net.ledger.phase("representations"):
        return reps_of(net.exchange("represent", {s: {"parts": ["aligned"]} for s in net.sites}), "aligned")


def client_update(net: Transport, label: Any, reps: dict, then_represent: list[str]) -> dict[str, dict]:
    """Alg. 1 lines 5-13, (2)-(5) in Fig. 2: partial gradients down with C, local k-means + SSL,
    new representations up."""
    with net.ledger.phase("partial_gradients"):
        grads = label.partial_gradients(reps)
    with net.ledger.phase("local_ssl"):
        return net.exchange(
            "oneshot_update",
            {s: {"grads": grads[s], "num_classes": label.num_classes, "represent": then_represent} for s in net.sites},
        )


def train_classifier(net: Transport, label: Any, reps: dict[str, dict]) -> dict[str, float]:
    """Alg. 1 lines 22-27, (6) in Fig. 2."""
    with net.ledger.phase("classifier"):
        return label.fit_classifier(reps)


class OneShotVFL:
    def __init__(self, cfg: VFLConfig, tracker: Tracker) -> None:
        self.cfg, self.tracker = cfg, tracker
        self.info: dict[str, int] = {}

    def run(self, net: Transport, label: Any, n_aligned: int) -> dict[str, float]:
        reps = upload_aligned_representations(net)
        reps = client_update(net, label, reps, then_represent=FINAL_PARTS)
        return train_classifier(net, label, reps)
