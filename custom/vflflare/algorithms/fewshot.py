"""Few-shot VFL (Sun et al. 2023, Alg. 1 with mode "few_shot" and Alg. 2): one more download and
upload than one-shot; cfg.finetune_epochs > 0 adds split-NN finetuning ("+finetune" in Table 1)."""
from __future__ import annotations

from typing import Any

from vflflare.algorithms.oneshot import FINAL_PARTS, client_update, train_classifier, upload_aligned_representations
from vflflare.algorithms.split_training import reps_of, train_split_nn
from vflflare.algorithms.transport import Transport
from vflflare.config import VFLConfig
from vflflare.tracking import Tracker


class FewShotVFL:
    def __init__(self, cfg: VFLConfig, tracker: Tracker) -> None:
        self.cfg, self.tracker = cfg, tracker
        self.info: dict[str, Any] = {}

    def run(self, net: Transport, label: Any, n_aligned: int) -> dict[str, float]:
        reps = upload_aligned_representations(net)
        reps = client_update(net, label, reps, then_represent=["aligned", "val", "unaligned"])
        with net.ledger.phase("pseudo_label_probabilities"):
            probs = label.infer_probabilities(reps_of(reps, "aligned"), reps_of(reps, "unaligned"), reps_of(reps, "val"))
        with net.ledger.phase("expanded_ssl"):
            reps = net.exchange("fewshot_update", {s: {"probs": probs[s], "represent": FINAL_PARTS} for s in net.sites})
        metrics = train_classifier(net, label, reps)
        if self.cfg.finetune_epochs > 0:
            tuned = train_split_nn(net, label, self.cfg, n_aligned, self.cfg.finetune_epochs, True, self.tracker, self.info)
            metrics = {**{f"pre_finetune_{k}": v for k, v in metrics.items()}, **tuned}
        return metrics
