"""Self-supervised VFL (Castiglia, Wang, Patterson, "Self-Supervised Vertical Federated Learning"):

- SS-VFL-I (Alg. 1): every party pretrains f_k by local contrastive learning (LocalCL, Alg. 4) on all
  its training rows, aligned or not, labeled or not, without communication; then sends the frozen
  representations of the labeled aligned rows once (with the validation and test rows, as one-shot
  VFL does), and the label party trains the prediction head on them. One upload per site, no download.
- SS-VFL-C (Alg. 2): the same pretraining, then split-NN training on the labeled aligned rows that
  keeps updating the pretrained f_k (supervised VFL's communication: per batch one upload and one
  download per site), with a fresh head at the label party and validation early stopping.

Ledger phases: "local_pretraining" (task round trip without payload: no communication), then
"representations" + "classifier" (SS-VFL-I) or "split_training" + "evaluation" (SS-VFL-C).
"""
from __future__ import annotations

from typing import Any

from vflflare.algorithms.oneshot import FINAL_PARTS, train_classifier
from vflflare.algorithms.split_training import train_split_nn
from vflflare.algorithms.transport import Transport
from vflflare.config import VFLConfig
from vflflare.tracking import Tracker


def local_pretraining(net: Transport, info: dict[str, Any]) -> None:
    """Alg. 1 lines 2-3 / Alg. 2 lines 2-4: LocalCL at every site in parallel. The request and the
    reply carry no tensors (the reply holds the site's pretraining stats as numbers), so nothing is
    counted as communication."""
    with net.ledger.phase("local_pretraining"):
        replies = net.exchange("contrastive_pretrain", {s: {"represent": []} for s in net.sites})
    stats = {site: reply.get("pretrain", {}) for site, reply in replies.items()}
    info["pretrain_steps"] = {site: int(s.get("steps", 0)) for site, s in stats.items()}
    info["pretrain_rows"] = {site: int(s.get("rows", 0)) for site, s in stats.items()}


class SSVFLI:
    def __init__(self, cfg: VFLConfig, tracker: Tracker) -> None:
        self.cfg, self.tracker = cfg, tracker
        self.info: dict[str, Any] = {}

    def run(self, net: Transport, label: Any, n_aligned: int) -> dict[str, float]:
        local_pretraining(net, self.info)
        with net.ledger.phase("representations"):  # Alg. 1 line 4: the one upload
            reps = net.exchange("represent", {s: {"parts": FINAL_PARTS} for s in net.sites})
        return train_classifier(net, label, reps)  # Alg. 1 lines 6-10, with validation early stopping


class SSVFLC:
    def __init__(self, cfg: VFLConfig, tracker: Tracker) -> None:
        self.cfg, self.tracker = cfg, tracker
        self.info: dict[str, Any] = {}

    def run(self, net: Transport, label: Any, n_aligned: int) -> dict[str, float]:
        local_pretraining(net, self.info)
        # Alg. 2 lines 5-17: supervised VFL from the pretrained f_k with a fresh head (split_begin(False))
        return train_split_nn(net, label, self.cfg, n_aligned, self.cfg.split_epochs, False, self.tracker, self.info)
