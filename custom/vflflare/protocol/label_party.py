"""Label party: labels, the classifier f_c on the parties' representations, evaluation. Hosted by the
coordinator (label_owner: server) or by a site (label_owner: site-N) behind the same methods; an
algorithm's own label steps live in a subclass in its plug-in (or a block mixin), declared with the
channel they travel on in `channels`. Representation dicts are keyed by site name; concatenation
follows `sites` order.
"""

from __future__ import annotations

import numpy as np
import torch

from vflflare.config import JobConfig
from vflflare.data.strings import pick
from vflflare.data.types import LabelTables
from vflflare.metrics import metric_name, score
from vflflare.models.fitting import fit_head, predict_proba
from vflflare.models.heads import MLPHead
from vflflare.privacy.accounting import account, noise_for_epsilon
from vflflare.privacy.defenses import defend_gradients, randomized_response
from vflflare.privacy.private_randomness import PrivateRandomness
from vflflare.protocol.alignment import AlignmentError
from vflflare.protocol.feature_party import declared
from vflflare.protocol.going_alone import GOING_ALONE, compare
from vflflare.protocol.state import PartyState
from vflflare.seeding import derive_seed, seeded_init
from vflflare.tracking import LogTracker, Tracker

LABEL_PARTS = ("aligned", "val", "test")


def class_counts(labels: np.ndarray) -> dict[int, int]:
    values, counts = np.unique(labels, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))


def check_classes(who: str, labels: dict[str, np.ndarray]) -> None:
    """Before any training: the aligned training, validation and test rows (those there are) each hold at
    least 2 classes; else the job would only fail at the end, when no AUC can be computed."""
    counts = {part: class_counts(y) for part, y in labels.items()}
    for part, seen in counts.items():
        if seen and len(seen) < 2:
            summary = "; ".join(f"{p} {c}" for p, c in counts.items())
            raise AlignmentError(
                f"{who}: the {part} rows hold only class(es) {sorted(seen)} (rows per class: {summary}); a "
                f"classifier needs at least 2 classes in each: align more rows of the missing class (more overlap "
                f"or labels), or change val_fraction / labeled_fraction"
            )


class LabelParty:
    # label steps a coordinator may call on a label-owning site, and the channel each travels on:
    # "exchange" (a task: phase calls) or "step" (aux: per-batch and per-epoch calls)
    channels = {"fit_classifier": "exchange", "evaluate": "step", "privacy_account": "step"}
    colocated = None  # the hosting site's feature party, when a site owns the labels (site_runtime._host_label)

    def __init__(
        self,
        tables: LabelTables,
        sites: list[str],
        cfg: JobConfig,
        tracker: Tracker | None = None,
        private: PrivateRandomness | None = None,
    ) -> None:
        """private: the source of every draw that protects the labels (privacy/private_randomness.py); default:
        VFLFLARE_PRIVATE_SEED at this party, else the OS."""
        if len(sites) < 1 or len(set(sites)) != len(sites):
            raise ValueError(f"label party needs distinct site names, got {sites}")
        if tables.num_classes < 2:
            raise ValueError(f"label party needs at least 2 classes, got num_classes={tables.num_classes}")
        self.tables = tables
        self.sites = list(sites)
        self.cfg = cfg
        self.tracker = tracker or LogTracker("vflflare.label")
        self.seed = derive_seed(cfg.seed, "label")
        self.private = private or PrivateRandomness.from_environment("label")
        self.state = PartyState("label party")
        # the test rows' IDs in the canonical order and the class probabilities of the last test evaluation:
        # a saved model keeps them as the training job's test predictions (model_store.py)
        self.test_ids: list[str] = []
        self.test_probs: np.ndarray | None = None
        self.val_probs: np.ndarray | None = None  # of the last validation evaluation: a blend's share is chosen on it
        # going_alone.py: (own model, its record, its test probabilities), fitted once, and, with
        # blend_own_model, (own model, federated share)
        self.own_model: tuple | None = None
        self.blend: tuple | None = None

    @classmethod
    def label_channels(cls) -> dict[str, str]:
        return declared(cls, "channels")

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
        check_classes(f"label party '{self.cfg.label_owner}'", labels)
        self.state["labels"] = {part: torch.as_tensor(y) for part, y in labels.items()}
        if self.cfg.label_dp_epsilon > 0:  # before anything is computed from them; validation and test stay true
            self.state["labels"]["aligned"] = randomized_response(
                self.state["labels"]["aligned"],
                self.num_classes,
                self.cfg.label_dp_epsilon,
                self.private.generator("label-dp"),
            )
        self.test_ids = pick(self.tables.test_ids, np.asarray(test_rows, dtype=np.int64).reshape(-1))

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
    def new_head(self, in_dim: int, purpose: str, sends_gradients: bool = False) -> MLPHead:
        """A fresh head whose initial weights depend only on (seed, purpose); a head whose gradients go to
        the sites is initialised privately when a gradient defense is on: a site that could re-create it would
        know the direction each row's gradient lies on and project the noise away."""
        private = sends_gradients and self.cfg.defends_gradients
        with self.private.init(purpose) if private else seeded_init(derive_seed(self.seed, purpose)):
            return MLPHead(in_dim, self.num_classes, self.cfg.classifier_hidden)

    def generator(self, purpose: str) -> torch.Generator:
        return torch.Generator().manual_seed(derive_seed(self.seed, f"{purpose}:batches"))

    def to_sites(self, grads: dict[str, torch.Tensor], labels: torch.Tensor, head: str) -> dict[str, torch.Tensor]:
        """Per-row gradients (of rows with these labels) as the sites without labels receive them: clipped,
        noised, sparsified as the job's DefenseSettings say (privacy/defenses.py); the label owner's own are
        never defended. head: "fresh" (a head not trained on the labels) or "trained", for the accounting."""
        cfg = self.cfg
        released = self.state.get("gradient_rows_released", {})
        self.state["gradient_rows_released"] = {**released, head: released.get(head, 0) + len(labels)}
        if cfg.gradient_clip == 0 and cfg.gradient_keep == 1 and cfg.gradient_marvell == 0:
            return grads
        if cfg.gradient_marvell and self.num_classes != 2:
            raise ValueError(
                f"gradient_marvell is for binary labels; this job's labels have {self.num_classes} "
                f"classes (use gradient_clip with gradient_noise)"
            )
        if "gradient_defense_generator" not in self.state:
            self.state["gradient_defense_generator"] = self.private.generator("gradient-defense")
        generator = self.state["gradient_defense_generator"]
        return {
            site: g
            if site == cfg.label_owner
            else defend_gradients(
                g,
                cfg.gradient_clip,
                self.noise_multiplier,
                cfg.gradient_keep,
                generator,
                cfg.gradient_marvell,
                labels,
                cfg.gradient_normalize,
            )
            for site, g in grads.items()
        }

    @property
    def noise_multiplier(self) -> float:
        """gradient_noise, or the noise gradient_dp_epsilon asks for over the job's planned passes."""
        cfg = self.cfg
        if not cfg.gradient_dp_epsilon:
            return cfg.gradient_noise
        if "noise_multiplier" not in self.state:
            self.state["noise_multiplier"] = noise_for_epsilon(
                cfg.gradient_dp_epsilon, cfg.gradient_passes, cfg.gradient_dp_delta
            )
        return self.state["noise_multiplier"]

    def privacy_account(self) -> dict:
        """The run's label-DP record (privacy/accounting.py), for the results."""
        receivers = len([s for s in self.sites if s != self.cfg.label_owner])
        return account(
            self.cfg,
            self.num_classes,
            len(self.part_labels("aligned")),
            self.state.get("gradient_rows_released", {}),
            receivers,
            self.noise_multiplier,
        )

    def part_labels(self, part: str) -> torch.Tensor:
        if "labels" not in self.state:
            raise RuntimeError("label party: call align() first")
        if part not in self.state["labels"]:
            raise ValueError(f"label party: unknown part {part!r}; expected one of {LABEL_PARTS}")
        return self.state["labels"][part]

    def concat(self, reps: dict[str, np.ndarray], part: str) -> torch.Tensor:
        """Site representations side by side in `sites` order, checked against the part's row count."""
        missing = [s for s in self.sites if s not in reps]
        if missing:
            raise ValueError(f"label party: no {part} representations from {missing}")
        n = len(self.part_labels(part))
        for site in self.sites:
            got = np.shape(reps[site])[0]
            if got != n:
                raise ValueError(f"label party: {site} sent {got} {part} representations, expected {n}")
            self.check_finite(site, part, reps[site])
        return torch.as_tensor(np.concatenate([np.asarray(reps[s], dtype=np.float32) for s in self.sites], axis=1))

    @staticmethod
    def check_finite(site: str, part: str, reps: np.ndarray) -> None:
        """Representations from a site whose training diverged end the job here, not in a chance-level model."""
        bad = int(np.size(reps) - np.isfinite(reps).sum())
        if bad:
            raise ValueError(
                f"label party: {site} sent {part} representations with {bad} NaN or infinite "
                f"values; its local training has diverged"
            )

    def fit(self, purpose: str, train: torch.Tensor, val: torch.Tensor | None) -> MLPHead:
        head = self.new_head(train.shape[1], purpose)
        val_pair = None if val is None else (val, self.part_labels("val"))
        fit_head(
            head,
            train,
            self.part_labels("aligned"),
            cfg=self.cfg,
            num_classes=self.num_classes,
            generator=self.generator(purpose),
            tracker=self.tracker,
            tag=purpose,
            val=val_pair,
        )
        return head

    def fit_classifier(self, reps: dict[str, dict[str, np.ndarray]]) -> dict[str, float]:
        """Alg. 1 lines 22-27 with validation early stopping. reps[site] has 'aligned', 'val', 'test'.
        Returns {'val_<metric>': .., 'test_<metric>': .., GOING_ALONE: the comparison (going_alone.py)}."""
        parts = {part: {s: reps[s][part] for s in self.sites if part in reps.get(s, {})} for part in LABEL_PARTS}
        has_val = len(self.part_labels("val")) > 0
        joint_val = self.concat(parts["val"], "val") if has_val else None
        self.state["classifier"] = self.fit("classifier", self.concat(parts["aligned"], "aligned"), joint_val)
        metrics = self.evaluate("val", parts["val"]) if has_val else {}
        return {**metrics, **self.evaluate("test", parts["test"], True)}

    def evaluate(self, part: str, reps: dict[str, np.ndarray], final: bool = False) -> dict:
        """Metric of f_c on 'val' or 'test' representations: {'<part>_<metric>': value}. The job's final test
        evaluation (`final`) also compares with going alone (going_alone.py) and adds the comparison under
        GOING_ALONE; with blend_own_model its metrics are the delivered blend's."""
        probs = predict_proba(self.state["classifier"], self.concat(reps, part))
        record = None
        if part == "val":
            self.val_probs = probs
        elif part == "test":
            if final:
                probs, record = compare(self, self.val_probs if len(self.part_labels("val")) else None, probs)
            self.test_probs = probs
        name, value = score(probs, self.part_labels(part).numpy(), self.num_classes)
        if record is None:
            return {f"{part}_{name}": value}
        blended = {f"val_{name}": record["blend"][f"val_{name}"]} if "blend" in record else {}
        return {f"{part}_{name}": value, **blended, GOING_ALONE: record}
