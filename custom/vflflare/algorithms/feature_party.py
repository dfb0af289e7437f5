"""Site-side party: owns its rows, its bottom model f_k and everything computed from raw features.

Only representations (and nothing derived from the temporary labels) leave this object.
The flows in vanilla.py/oneshot.py/fewshot.py/ssvfl.py call it.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from vflflare.algorithms.kmeans import kmeans_on_gradients
from vflflare.config import VFLConfig
from vflflare.data.types import SiteTables
from vflflare.models.tabular import MLPHead, ProjectionHead, TabularEncoder, seeded_init
from vflflare.seeding import derive_seed
from vflflare.ssl.augment import ScarfCorruption, TabularBatch, TwoViews, WeakStrongViews, fixmatch_tab_views
from vflflare.ssl.fixmatch import FixMatchLoss
from vflflare.ssl.losses import NTXentLoss
from vflflare.tracking import LogTracker, Tracker

PARTS = ("aligned", "val", "test", "unaligned")
_REPRESENT_CHUNK = 8192  # rows per no-grad forward, to bound memory on large tables


def _endless_batches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Reshuffled passes over range(n), as FixMatch draws labeled batches independently of the epoch."""
    while True:
        order = torch.randperm(n, generator=generator)
        for start in range(0, n - batch_size + 1, batch_size):
            yield order[start : start + batch_size]


class FeatureParty:
    def __init__(self, site: str, tables: SiteTables, cfg: VFLConfig, tracker: Tracker | None = None) -> None:
        """Build f_k (TabularEncoder -> rep_dim) seeded by derive_seed(cfg.seed, site)."""
        self.site = site
        self.tables = tables
        self.cfg = cfg
        self.tracker = tracker or LogTracker(f"vflflare.{site}")
        self.seed = derive_seed(cfg.seed, site)
        self.generator = torch.Generator().manual_seed(self.seed)
        with seeded_init(self.seed):
            self.encoder = TabularEncoder(
                tables.train.numeric.shape[1], tables.train.cardinalities, cfg.hidden_dim, cfg.rep_dim
            )
        self._train = TabularBatch.from_block(tables.train)
        self._test = TabularBatch.from_block(tables.test)
        self._rows: dict[str, torch.Tensor] = {}
        # local SSL state (Alg. 1 ClientUpdate, Alg. 2 ClientUpdateFewshot)
        self._views: WeakStrongViews | None = None
        self._head: MLPHead | None = None
        self._num_classes = 0
        self._ssl_optimizer: torch.optim.Optimizer | None = None
        self._temporary_labels: torch.Tensor | None = None
        # split-NN state
        self._split_optimizer: torch.optim.Optimizer | None = None
        self._split_batch: TabularBatch | None = None
        self._split_out: torch.Tensor | None = None
        self._candidate: dict[str, torch.Tensor] | None = None
        self._best: dict[str, torch.Tensor] | None = None

    # ------------------------------------------------------------------ rows
    def align(self, train_rows: np.ndarray, val_rows: np.ndarray, test_rows: np.ndarray) -> None:
        """Row indices into tables.train (aligned labeled rows, validation rows) and tables.test, each
        in the canonical order shared by all parties. Unaligned = the other rows of tables.train."""
        n_train, n_test = len(self.tables.train), len(self.tables.test)
        parts = {
            "aligned": self._check_rows("aligned", train_rows, n_train, "train"),
            "val": self._check_rows("val", val_rows, n_train, "train"),
            "test": self._check_rows("test", test_rows, n_test, "test"),
        }
        overlap = np.intersect1d(parts["aligned"], parts["val"])
        if len(overlap):
            raise ValueError(
                f"{self.site}: {len(overlap)} train rows are both aligned-labeled and validation, e.g. row {overlap[0]}"
            )
        if len(parts["aligned"]) == 0:
            raise ValueError(f"{self.site}: no aligned labeled rows")
        parts["unaligned"] = np.setdiff1d(np.arange(n_train), np.concatenate([parts["aligned"], parts["val"]]))
        self._rows = {name: torch.as_tensor(rows, dtype=torch.int64) for name, rows in parts.items()}
        # the local means come from the SSL training rows only: validation rows stay out of training
        ssl_rows = np.concatenate([parts["aligned"], parts["unaligned"]])
        self._views = fixmatch_tab_views(
            self.tables.train.take(ssl_rows), self.cfg.mask_rate, self.cfg.noise_std, self.generator
        )

    def _check_rows(self, part: str, rows: np.ndarray, n: int, table: str) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            bad = rows[(rows < 0) | (rows >= n)][0]
            raise ValueError(f"{self.site}: {part} row index {bad} is outside the {table} table ({n} rows)")
        if len(np.unique(rows)) != len(rows):
            raise ValueError(f"{self.site}: duplicate row indices in the {part} rows")
        return rows

    def _rows_of(self, part: str) -> torch.Tensor:
        if part not in PARTS:
            raise ValueError(f"{self.site}: unknown part {part!r}; expected one of {PARTS}")
        if not self._rows:
            raise RuntimeError(f"{self.site}: call align() before using the {part} rows")
        return self._rows[part]

    def _part(self, part: str) -> TabularBatch:
        return (self._test if part == "test" else self._train).take(self._rows_of(part))

    def _encode(self, batch: TabularBatch) -> torch.Tensor:
        return self.encoder(batch.numeric, batch.categorical)

    def represent(self, parts: list[str]) -> dict[str, np.ndarray]:
        """float32 [n_part, rep_dim] representations (eval mode, no grad) of each requested part."""
        self.encoder.eval()
        out = {}
        with torch.no_grad():
            for part in parts:
                batch = self._part(part)
                n = batch.numeric.shape[0]
                chunks = [
                    self._encode(batch.take(torch.arange(s, min(s + _REPRESENT_CHUNK, n))))
                    for s in range(0, n, _REPRESENT_CHUNK)
                ]
                reps = torch.cat(chunks) if chunks else torch.zeros(0, self.cfg.rep_dim)
                out[part] = reps.numpy().astype(np.float32)
        return out

    # ------------------------------------------------------------------ local SSL
    def oneshot_update(self, grads: np.ndarray, num_classes: int) -> dict[str, Any]:
        """Alg. 1 ClientUpdate: k-means on the partial gradients -> temporary labels of the aligned rows,
        then local FixMatch-tab SSL on aligned (labeled) + unaligned rows. Returns small stats for the log
        (never the temporary labels)."""
        grads = np.asarray(grads, dtype=np.float32)
        expected = (len(self._rows_of("aligned")), self.cfg.rep_dim)
        if grads.shape != expected:
            raise ValueError(f"{self.site}: partial gradients have shape {grads.shape}, expected {expected}")
        self._temporary_labels = torch.as_tensor(kmeans_on_gradients(grads, num_classes, self.seed))
        self._num_classes = num_classes
        with seeded_init(derive_seed(self.seed, "ssl_head")):
            self._head = MLPHead(self.cfg.rep_dim, num_classes)
        self._ssl_optimizer = torch.optim.Adam(
            [*self.encoder.parameters(), *self._head.parameters()], lr=self.cfg.lr
        )
        return self._local_ssl("oneshot", self._rows["aligned"], self._temporary_labels, self._rows["unaligned"])

    def fewshot_update(self, probs: np.ndarray) -> dict[str, Any]:
        """Alg. 2 ClientUpdateFewshot: probs[i] = p^_{u,i} for the unaligned rows in represent() order."""
        if self._head is None or self._temporary_labels is None:
            raise RuntimeError(f"{self.site}: fewshot_update needs a preceding oneshot_update")
        unaligned = self._rows["unaligned"]
        probs = torch.as_tensor(np.asarray(probs, dtype=np.float32)).reshape(-1)
        if len(probs) != len(unaligned):
            raise ValueError(
                f"{self.site}: got {len(probs)} pseudo-label probabilities for {len(unaligned)} unaligned rows"
            )
        if not bool(torch.all((probs >= 0) & (probs <= 1))):
            raise ValueError(f"{self.site}: pseudo-label probabilities must lie in [0, 1]")
        chosen = torch.bernoulli(probs, generator=self.generator).bool()  # X_uc, line 10
        chosen_rows = unaligned[chosen]
        pseudo = self._predict(chosen_rows)  # line 11: the local model's own predictions
        labeled_rows = torch.cat([self._rows["aligned"], chosen_rows])  # Eq. 11
        labels = torch.cat([self._temporary_labels, pseudo])
        stats = self._local_ssl("fewshot", labeled_rows, labels, unaligned[~chosen])
        return {**stats, "pseudo_labeled": int(chosen.sum())}

    def _predict(self, rows: torch.Tensor) -> torch.Tensor:
        self.encoder.eval()
        with torch.no_grad():
            return self._head(self._encode(self._train.take(rows))).argmax(dim=1)

    def _local_ssl(
        self, phase: str, labeled_rows: torch.Tensor, labels: torch.Tensor, unlabeled_rows: torch.Tensor
    ) -> dict[str, Any]:
        """FixMatch-tab (Eq. 4-6) on the site's training rows; an epoch is one pass over the unlabeled rows."""
        cfg, head, num_classes = self.cfg, self._head, self._num_classes
        n_l, n_u = len(labeled_rows), len(unlabeled_rows)
        loss_fn = FixMatchLoss(
            num_classes,
            cfg.fixmatch_threshold,
            cfg.lambda_u,
            cfg.class_balance,
            labeled_marginal=(torch.bincount(labels, minlength=num_classes).float() / n_l).tolist(),
            num_unlabeled=n_u,
        )
        labeled_batches = _endless_batches(n_l, min(cfg.batch_size, n_l), self.generator)
        unlabeled_batch = cfg.unlabeled_ratio * cfg.batch_size
        steps = math.ceil(n_u / unlabeled_batch) if n_u else math.ceil(n_l / cfg.batch_size)
        self.encoder.train()
        epoch_loss = mask_rate = 0.0
        for epoch in range(cfg.ssl_epochs):
            order = torch.randperm(n_u, generator=self.generator)
            total = masked = 0.0
            for step in range(steps):
                u_pos = order[step * unlabeled_batch : (step + 1) * unlabeled_batch]
                l_pos = next(labeled_batches)
                labeled = self._views.weak(self._train.take(labeled_rows[l_pos]))
                weak, strong = self._views(self._train.take(unlabeled_rows[u_pos]))
                numeric = torch.cat([labeled.numeric, weak.numeric, strong.numeric])
                categorical = torch.cat([labeled.categorical, weak.categorical, strong.categorical])
                logits = head(self.encoder(numeric, categorical))
                logits_l, logits_w, logits_s = logits.split([len(l_pos), len(u_pos), len(u_pos)])
                loss = loss_fn(logits_l, labels[l_pos], logits_w, logits_s, u_pos)
                self._ssl_optimizer.zero_grad()
                loss.backward()
                self._ssl_optimizer.step()
                total += loss.item()
                masked += loss_fn.last_mask_rate
            epoch_loss, mask_rate = total / steps, masked / steps
            self.tracker.scalar(f"ssl/{phase}_loss", epoch_loss, epoch)
            self.tracker.scalar(f"ssl/{phase}_pseudo_label_rate", mask_rate, epoch)
        self.tracker.info(
            f"{self.site}: {phase} SSL done, {cfg.ssl_epochs} epochs on {n_l} labeled + {n_u} unlabeled rows, "
            f"last loss {epoch_loss:.4f}"
        )
        return {"labeled": n_l, "unlabeled": n_u, "ssl_loss": epoch_loss, "pseudo_label_rate": mask_rate}

    # ------------------------------------------------------------------ contrastive pretraining (SS-VFL)
    def contrastive_pretrain(self) -> dict[str, Any]:
        """LocalCL of the SS-VFL paper (Alg. 4, Eq. 2): train f_k with a projection head g and the
        in-batch NT-Xent loss on two SCARF-corrupted views of each row, without labels or communication.

        Rows: every local training row (aligned or not, labeled or not) except the validation rows;
        test rows never. The corruption's replacement values are drawn from the same rows. The paper
        leaves the view generator, head and schedule open (it works on images); our choices: SCARF
        (rate cfg.scarf_rate, two independently corrupted views), g = ProjectionHead(rep_dim ->
        projection_dim), Adam at cfg.pretrain_lr, cfg.pretrain_epochs passes of batches of
        cfg.pretrain_batch_size (T_un = epochs x batches per epoch). g is discarded afterwards.
        Returns small stats for the log."""
        cfg = self.cfg
        rows = torch.cat([self._rows_of("aligned"), self._rows_of("unaligned")])
        n = len(rows)
        if n < 2:
            raise ValueError(f"{self.site}: contrastive pretraining needs at least 2 training rows, got {n}")
        local = self._train.take(rows)
        generator = torch.Generator().manual_seed(derive_seed(self.seed, "contrastive"))
        views = TwoViews(ScarfCorruption(local, rate=cfg.scarf_rate, generator=generator))
        loss_fn = NTXentLoss(temperature=cfg.cl_temperature)
        with seeded_init(derive_seed(self.seed, "projection_head")):
            projection = ProjectionHead(cfg.rep_dim, cfg.projection_dim)
        optimizer = torch.optim.Adam([*self.encoder.parameters(), *projection.parameters()], lr=cfg.pretrain_lr)
        batch = min(cfg.pretrain_batch_size, n)
        # full batches only: a trailing batch of 1 row has no negatives
        steps_per_epoch = n // batch
        self.encoder.train()
        epoch_loss, steps = float("nan"), 0
        for epoch in range(cfg.pretrain_epochs):
            order = torch.randperm(n, generator=generator)
            total = 0.0
            for step in range(steps_per_epoch):
                view1, view2 = views(local.take(order[step * batch : (step + 1) * batch]))
                z1 = projection(self._encode(view1))
                z2 = projection(self._encode(view2))
                loss = loss_fn(z1, z2)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.item()
                steps += 1
            epoch_loss = total / steps_per_epoch
            self.tracker.scalar("pretrain/contrastive_loss", epoch_loss, epoch)
        self.tracker.info(
            f"{self.site}: contrastive pretraining done, {cfg.pretrain_epochs} epochs ({steps} steps of {batch}) "
            f"on {n} local training rows, last loss {epoch_loss:.4f}"
        )
        return {"rows": n, "epochs": cfg.pretrain_epochs, "steps": steps, "contrastive_loss": epoch_loss}

    # ------------------------------------------------------------------ split-NN
    def split_forward(self, part: str, rows: np.ndarray) -> np.ndarray:
        """Training-mode forward of positions `rows` within `part`; keeps the graph for split_backward."""
        batch = self._part(part).take(torch.as_tensor(np.asarray(rows, dtype=np.int64)))
        if self._split_optimizer is None:
            self._split_optimizer = torch.optim.Adam(self.encoder.parameters(), lr=self.cfg.lr)
        self.encoder.train()
        self._split_batch = batch
        self._split_out = self._encode(batch)
        return self._split_out.detach().numpy().astype(np.float32)

    def split_backward(self, grad: np.ndarray) -> None:
        """Apply dL/dH for the last split_forward; with cfg.local_steps = Q > 1 (FedBCD) take Q-1 more
        steps re-using that stale gradient on fresh forwards of the same rows."""
        if self._split_out is None:
            raise RuntimeError(f"{self.site}: split_backward without a preceding split_forward")
        grad_t = torch.as_tensor(np.asarray(grad, dtype=np.float32))
        if grad_t.shape != self._split_out.shape:
            raise ValueError(
                f"{self.site}: gradient shape {tuple(grad_t.shape)} != representations {tuple(self._split_out.shape)}"
            )
        out = self._split_out
        for step in range(self.cfg.local_steps):
            if step > 0:
                out = self._encode(self._split_batch)
            self._split_optimizer.zero_grad()
            out.backward(grad_t)
            self._split_optimizer.step()
        self._split_out = self._split_batch = None

    # ------------------------------------------------------------------ early stopping
    def keep_candidate(self) -> None:
        """Remember the current weights as a candidate best (called when validation reps are taken)."""
        self._candidate = copy.deepcopy(self.encoder.state_dict())

    def commit_candidate(self) -> None:
        if self._candidate is None:
            raise RuntimeError(f"{self.site}: commit_candidate without keep_candidate")
        self._best = self._candidate

    def restore_best(self) -> None:
        if self._best is None:
            raise RuntimeError(f"{self.site}: restore_best before any commit_candidate")
        self.encoder.load_state_dict(self._best)
