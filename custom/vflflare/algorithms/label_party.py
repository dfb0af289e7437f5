"""Label party: labels, classifier f_c (and the auxiliary per-party classifiers), loss, gradients,
evaluation. Hosted by the coordinator (label_owner: server) or by a site (label_owner: site-N) behind
the same methods. Representation dicts are keyed by site name; concatenation follows `sites` order.
CONTRACT (implemented by the algorithms helper).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from vflflare.config import VFLConfig
from vflflare.data.types import LabelTables
from vflflare.tracking import Tracker


class LabelParty:
    def __init__(self, tables: LabelTables, sites: list[str], cfg: VFLConfig, tracker: Tracker | None = None) -> None:
        raise NotImplementedError

    @property
    def num_classes(self) -> int:
        raise NotImplementedError

    @property
    def metric_name(self) -> str:
        """'auc' for binary tasks, 'accuracy' otherwise."""
        raise NotImplementedError

    def align(self, train_rows: np.ndarray, val_rows: np.ndarray, test_rows: np.ndarray) -> None:
        """Row indices into tables.train / tables.test in the canonical order."""
        raise NotImplementedError

    def partial_gradients(self, reps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Alg. 1 lines 1, 5-7: fresh theta_c, CE loss on the aligned labeled rows, dLoss/dH_o^k per site."""
        raise NotImplementedError

    def infer_probabilities(self, aligned: dict[str, np.ndarray], unaligned: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Alg. 2 InferProb for every site: auxiliary classifiers f_c^k, classifier f_c, SDPA estimate of
        the other parties' representations (Eq. 10), p^_u per unaligned row (Eq. 8-9)."""
        raise NotImplementedError

    def fit_classifier(self, reps: dict[str, dict[str, np.ndarray]]) -> dict[str, float]:
        """Alg. 1 lines 22-27 with validation early stopping. reps[site] has 'aligned', 'val', 'test'.
        Returns {'val_<metric>': .., 'test_<metric>': ..}."""
        raise NotImplementedError

    def split_begin(self, keep_classifier: bool) -> None:
        """Start split-NN training: fresh f_c (vanilla) or keep the trained one (finetune)."""
        raise NotImplementedError

    def split_step(self, rows: np.ndarray, reps: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
        """Forward f_c on the batch (positions within the aligned rows), loss, update f_c (Q times with
        FedBCD), return dL/dH per site and the loss."""
        raise NotImplementedError

    def evaluate(self, part: str, reps: dict[str, np.ndarray]) -> dict[str, float]:
        """Metric of f_c on 'val' or 'test' representations: {'<part>_<metric>': value}."""
        raise NotImplementedError

    def keep_candidate(self) -> None:
        raise NotImplementedError

    def commit_candidate(self) -> None:
        raise NotImplementedError

    def restore_best(self) -> None:
        raise NotImplementedError
