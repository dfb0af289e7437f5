"""Site-side party: owns its rows, its bottom model f_k and everything computed from raw features.

Only representations (and nothing derived from the temporary labels) leave this object.
CONTRACT (implemented by the algorithms helper; the flows in vanilla.py/oneshot.py/fewshot.py call it).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from vflflare.config import VFLConfig
from vflflare.data.types import SiteTables
from vflflare.tracking import Tracker

PARTS = ("aligned", "val", "test", "unaligned")


class FeatureParty:
    def __init__(self, site: str, tables: SiteTables, cfg: VFLConfig, tracker: Tracker | None = None) -> None:
        """Build f_k (TabularEncoder -> rep_dim) seeded by derive_seed(cfg.seed, site)."""
        raise NotImplementedError

    def align(self, train_rows: np.ndarray, val_rows: np.ndarray, test_rows: np.ndarray) -> None:
        """Row indices into tables.train (aligned labeled rows, validation rows) and tables.test, each
        in the canonical order shared by all parties. Unaligned = the other rows of tables.train."""
        raise NotImplementedError

    def represent(self, parts: list[str]) -> dict[str, np.ndarray]:
        """float32 [n_part, rep_dim] representations (eval mode, no grad) of each requested part."""
        raise NotImplementedError

    def oneshot_update(self, grads: np.ndarray, num_classes: int) -> dict[str, Any]:
        """Alg. 1 ClientUpdate: k-means on the partial gradients -> temporary labels of the aligned rows,
        then local FixMatch-tab SSL on aligned (labeled) + unaligned rows. Returns small stats for the log
        (never the temporary labels)."""
        raise NotImplementedError

    def fewshot_update(self, probs: np.ndarray) -> dict[str, Any]:
        """Alg. 2 ClientUpdateFewshot: probs[i] = p^_{u,i} for the unaligned rows in represent() order."""
        raise NotImplementedError

    def split_forward(self, part: str, rows: np.ndarray) -> np.ndarray:
        """Training-mode forward of positions `rows` within `part`; keeps the graph for split_backward."""
        raise NotImplementedError

    def split_backward(self, grad: np.ndarray) -> None:
        """Apply dL/dH for the last split_forward; with cfg.local_steps = Q > 1 (FedBCD) take Q-1 more
        steps re-using that stale gradient on fresh forwards of the same rows."""
        raise NotImplementedError

    def keep_candidate(self) -> None:
        """Remember the current weights as a candidate best (called when validation reps are taken)."""
        raise NotImplementedError

    def commit_candidate(self) -> None:
        raise NotImplementedError

    def restore_best(self) -> None:
        raise NotImplementedError
