"""Label party: labels, classifier f_c (and the auxiliary per-party classifiers), loss, gradients,
evaluation. Hosted by the coordinator (label_owner: server) or by a site (label_owner: site-N) behind
the same methods. Representation dicts are keyed by site name; concatenation follows `sites` order.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F

from vflflare.algorithms.classifier import fit_head, predict_proba
from vflflare.algorithms.representation_estimation import (
    class_thresholds,
    estimate_joint_representations,
    pseudo_label_probabilities,
)
from vflflare.config import VFLConfig
from vflflare.data.types import LabelTables
from vflflare.metrics import metric_name, score
from vflflare.models.tabular import MLPHead, seeded_init
from vflflare.seeding import derive_seed
from vflflare.tracking import LogTracker, Tracker

LABEL_PARTS = ("aligned", "val", "test")


class LabelParty:
    def __init__(self, tables: LabelTables, sites: list[str], cfg: VFLConfig, tracker: Tracker | None = None) -> None:
        if len(sites) < 1 or len(set(sites)) != len(sites):
            raise ValueError(f"label party needs distinct site names, got {sites}")
        if tables.num_classes < 2:
            raise ValueError(f"label party needs at least 2 classes, got num_classes={tables.num_classes}")
        self.tables = tables
        self.sites = list(sites)
        self.cfg = cfg
        self.tracker = tracker or LogTracker("vflflare.label")
        self.seed = derive_seed(cfg.seed, "label")
        self._labels: dict[str, torch.Tensor] = {}
        self.classifier: MLPHead | None = None
        self._split_optimizer: torch.optim.Optimizer | None = None
        self._candidate: dict[str, torch.Tensor] | None = None
        self._best: dict[str, torch.Tensor] | None = None

    @property
    def num_classes(self) -> int:
        return self.tables.num_classes

    @property
    def metric_name(self) -> str:
        """'auc' for binary tasks, 'accuracy' otherwise."""
        return metric_name(self.num_classes)

    def align(self, train_rows: np.ndarray, val_rows: np.ndarray, test_rows: np.ndarray) -> None:
        """Row indices into tables.train / tables.test in the canonical order."""
        labels = {
            "aligned": self._labels_of("aligned", train_rows, self.tables.train_labels, "train"),
            "val": self._labels_of("val", val_rows, self.tables.train_labels, "train"),
            "test": self._labels_of("test", test_rows, self.tables.test_labels, "test"),
        }
        if len(np.intersect1d(train_rows, val_rows)):
            raise ValueError("label party: some train rows are both aligned-labeled and validation rows")
        if len(labels["aligned"]) == 0:
            raise ValueError("label party: no aligned labeled rows")
        self._labels = {part: torch.as_tensor(y) for part, y in labels.items()}

    def _labels_of(self, part: str, rows: np.ndarray, all_labels: np.ndarray, table: str) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(all_labels)):
            raise ValueError(f"label party: a {part} row index is outside the {table} labels ({len(all_labels)} rows)")
        if len(np.unique(rows)) != len(rows):
            raise ValueError(f"label party: duplicate row indices in the {part} rows")
        labels = np.asarray(all_labels, dtype=np.int64)[rows]
        bad = np.flatnonzero((labels < 0) | (labels >= self.num_classes))
        if len(bad):
            row, value = rows[bad[0]], labels[bad[0]]
            raise ValueError(f"label party: {table} row {row} has label {value} outside 0..{self.num_classes - 1}")
        return labels

    # ------------------------------------------------------------------ helpers
    def _new_head(self, in_dim: int, purpose: str) -> MLPHead:
        """A fresh head whose initial weights depend only on (seed, purpose)."""
        with seeded_init(derive_seed(self.seed, purpose)):
            return MLPHead(in_dim, self.num_classes, self.cfg.classifier_hidden)

    def _generator(self, purpose: str) -> torch.Generator:
        return torch.Generator().manual_seed(derive_seed(self.seed, f"{purpose}:batches"))

    def _part_labels(self, part: str) -> torch.Tensor:
        if not self._labels:
            raise RuntimeError("label party: call align() first")
        if part not in self._labels:
            raise ValueError(f"label party: unknown part {part!r}; expected one of {LABEL_PARTS}")
        return self._labels[part]

    def _concat(self, reps: dict[str, np.ndarray], part: str) -> torch.Tensor:
        """Site representations side by side in `sites` order, checked against the part's row count."""
        missing = [s for s in self.sites if s not in reps]
        if missing:
            raise ValueError(f"label party: no {part} representations from {missing}")
        n = len(self._part_labels(part))
        for site in self.sites:
            got = np.shape(reps[site])[0]
            if got != n:
                raise ValueError(f"label party: {site} sent {got} {part} representations, expected {n}")
        return torch.as_tensor(np.concatenate([np.asarray(reps[s], dtype=np.float32) for s in self.sites], axis=1))

    def _fit(self, purpose: str, train: torch.Tensor, val: torch.Tensor | None) -> MLPHead:
        head = self._new_head(train.shape[1], purpose)
        val_pair = None if val is None else (val, self._part_labels("val"))
        fit_head(
            head, train, self._part_labels("aligned"), self.cfg, self.num_classes, self._generator(purpose),
            self.tracker, purpose, val_pair,
        )
        return head

    # ------------------------------------------------------------------ one-shot / few-shot
    def partial_gradients(self, reps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Alg. 1 lines 1, 5-7: fresh theta_c, CE loss on the aligned labeled rows, dLoss/dH_o^k per site."""
        joint = self._concat(reps, "aligned")
        head = self._new_head(joint.shape[1], "partial_gradients")
        per_site = [torch.as_tensor(np.asarray(reps[s], dtype=np.float32)).requires_grad_(True) for s in self.sites]
        loss = F.cross_entropy(head(torch.cat(per_site, dim=1)), self._part_labels("aligned"))
        grads = torch.autograd.grad(loss, per_site)
        return {site: g.numpy().astype(np.float32) for site, g in zip(self.sites, grads)}

    def unaligned_predictions(
        self,
        aligned: dict[str, np.ndarray],
        unaligned: dict[str, np.ndarray],
        val: dict[str, np.ndarray] | None = None,
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Eq. 8 inputs per site: (f_c^k(H_u^k), f_c(H_u^k with the others' estimated by Eq. 10)) as
        class probabilities. f_c^k and f_c are trained on the aligned rows (Alg. 2 lines 1-4), early
        stopped on `val` when given."""
        joint = self._concat(aligned, "aligned")
        joint_val = None if val is None else self._concat(val, "val")
        classifier = self._fit("fewshot_classifier", joint, joint_val)
        aligned_list = [np.asarray(aligned[s], dtype=np.float32) for s in self.sites]
        out = {}
        for site in unaligned:
            if site not in self.sites:
                raise ValueError(f"label party: unaligned representations from unknown site {site!r}")
            k = self.sites.index(site)
            own_val = None if val is None else torch.as_tensor(np.asarray(val[site], dtype=np.float32))
            auxiliary = self._fit(f"auxiliary:{site}", torch.as_tensor(aligned_list[k]), own_val)
            h_u = np.asarray(unaligned[site], dtype=np.float32)
            local = predict_proba(auxiliary, torch.as_tensor(h_u))
            estimated = estimate_joint_representations(k, h_u, aligned_list)
            out[site] = (local, predict_proba(classifier, torch.as_tensor(estimated)))
        return out

    def infer_probabilities(
        self,
        aligned: dict[str, np.ndarray],
        unaligned: dict[str, np.ndarray],
        val: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """Alg. 2 InferProb for every site: auxiliary classifiers f_c^k, classifier f_c, SDPA estimate of
        the other parties' representations (Eq. 10), p^_u per unaligned row (Eq. 8-9)."""
        predictions = self.unaligned_predictions(aligned, unaligned, val)
        labels = self._part_labels("aligned").numpy()
        prior = np.bincount(labels, minlength=self.num_classes) / len(labels)
        thresholds = class_thresholds(self.cfg.fewshot_threshold, self.num_classes, self.cfg.fewshot_threshold_mode, prior)
        return {
            site: pseudo_label_probabilities(local, joint, thresholds) for site, (local, joint) in predictions.items()
        }

    def fit_classifier(self, reps: dict[str, dict[str, np.ndarray]]) -> dict[str, float]:
        """Alg. 1 lines 22-27 with validation early stopping. reps[site] has 'aligned', 'val', 'test'.
        Returns {'val_<metric>': .., 'test_<metric>': ..}."""
        parts = {part: {s: reps[s][part] for s in self.sites if part in reps.get(s, {})} for part in LABEL_PARTS}
        has_val = len(self._part_labels("val")) > 0
        joint_val = self._concat(parts["val"], "val") if has_val else None
        self.classifier = self._fit("classifier", self._concat(parts["aligned"], "aligned"), joint_val)
        metrics = self.evaluate("val", parts["val"]) if has_val else {}
        return {**metrics, **self.evaluate("test", parts["test"])}

    # ------------------------------------------------------------------ split-NN
    def split_begin(self, keep_classifier: bool) -> None:
        """Start split-NN training: fresh f_c (vanilla) or keep the trained one (finetune)."""
        if keep_classifier and self.classifier is None:
            raise RuntimeError("label party: split_begin(keep_classifier=True) needs a fitted classifier")
        if not keep_classifier:
            # every site's encoder outputs cfg.rep_dim, so the input width is known before any batch
            self.classifier = self._new_head(self.cfg.rep_dim * len(self.sites), "split_classifier")
        self._split_optimizer = torch.optim.Adam(self.classifier.parameters(), lr=self.cfg.lr)
        self._candidate = self._best = None

    def split_step(self, rows: np.ndarray, reps: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
        """Forward f_c on the batch (positions within the aligned rows), loss, update f_c (Q times with
        FedBCD), return dL/dH per site and the loss."""
        if self._split_optimizer is None:
            raise RuntimeError("label party: split_step before split_begin")
        labels = self._part_labels("aligned")[torch.as_tensor(np.asarray(rows, dtype=np.int64))]
        per_site = [torch.as_tensor(np.asarray(reps[s], dtype=np.float32)).requires_grad_(True) for s in self.sites]
        self.classifier.train()
        loss = F.cross_entropy(self.classifier(torch.cat(per_site, dim=1)), labels)
        self._split_optimizer.zero_grad()
        loss.backward()
        self._split_optimizer.step()
        stale = torch.cat([h.detach() for h in per_site], dim=1)
        for _ in range(self.cfg.local_steps - 1):
            self._split_optimizer.zero_grad()
            F.cross_entropy(self.classifier(stale), labels).backward()
            self._split_optimizer.step()
        return {s: h.grad.numpy().astype(np.float32) for s, h in zip(self.sites, per_site)}, loss.item()

    def evaluate(self, part: str, reps: dict[str, np.ndarray]) -> dict[str, float]:
        """Metric of f_c on 'val' or 'test' representations: {'<part>_<metric>': value}."""
        if self.classifier is None:
            raise RuntimeError("label party: evaluate before a classifier exists")
        probs = predict_proba(self.classifier, self._concat(reps, part))
        name, value = score(probs, self._part_labels(part).numpy(), self.num_classes)
        return {f"{part}_{name}": value}

    # ------------------------------------------------------------------ early stopping
    def keep_candidate(self) -> None:
        if self.classifier is None:
            raise RuntimeError("label party: keep_candidate before a classifier exists")
        self._candidate = copy.deepcopy(self.classifier.state_dict())

    def commit_candidate(self) -> None:
        if self._candidate is None:
            raise RuntimeError("label party: commit_candidate without keep_candidate")
        self._best = self._candidate

    def restore_best(self) -> None:
        if self._best is None:
            raise RuntimeError("label party: restore_best before any commit_candidate")
        self.classifier.load_state_dict(self._best)
