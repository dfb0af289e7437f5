"""The local semi-supervised block of one-shot and few-shot VFL: a site trains f_k with FixMatch-tab
(Eq. 4-6) on its labeled rows (temporary or pseudo-labels) and its unlabeled rows, with a local head
that never leaves the site. `FixMatchSite` is mixed into a FeatureParty."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from vflflare.config import Settings
from vflflare.models.heads import MLPHead
from vflflare.seeding import derive_seed, seeded_init
from vflflare.ssl.fixmatch import CLASS_BALANCE, FixMatchLoss
from vflflare.tracking import Progress


@dataclass
class FixMatchSettings(Settings):
    ssl_epochs: int = 10  # passes of each site's local FixMatch SSL over its unlabeled rows
    mask_rate: float = 0.2  # r_m (paper)
    noise_std: float = 0.1  # sigma (paper)
    lambda_u: float = 1.0  # weight of the unlabeled (consistency) loss
    fixmatch_threshold: float = 0.95  # FixMatch's tau
    unlabeled_ratio: int = 7  # FixMatch's mu
    class_balance: str = "none"  # none | distribution_alignment | balanced_threshold

    bounds = {"ssl_epochs": (1, None), "unlabeled_ratio": (1, None)}  # ranges: Settings.validate checks them

    def validate(self) -> None:
        super().validate()
        self.check(0.0 <= self.mask_rate <= 1.0, "mask_rate", "must be in [0, 1]")
        self.check(self.class_balance in CLASS_BALANCE, "class_balance", f"must be one of {list(CLASS_BALANCE)}")


def endless_batches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Reshuffled passes over range(n), as FixMatch draws labeled batches independently of the epoch."""
    while True:
        order = torch.randperm(n, generator=generator)
        for start in range(0, n - batch_size + 1, batch_size):
            yield order[start : start + batch_size]


class FixMatchSite:
    """State: "ssl_head" (the local classifier), "ssl_optimizer" (Adam over f_k and the head, kept
    across the one-shot and few-shot rounds)."""

    def start_local_ssl(self, num_classes: int) -> None:
        with seeded_init(derive_seed(self.seed, "ssl_head")):
            self.state["ssl_head"] = self.on_device(MLPHead(self.cfg.rep_dim, num_classes))
        self.state["ssl_optimizer"] = torch.optim.Adam(
            [*self.encoder.parameters(), *self.state["ssl_head"].parameters()],
            lr=self.cfg.lr,
            weight_decay=self.cfg.weight_decay,
        )

    def strong_view_scarf_rate(self) -> float | None:
        """SCARF's corruption rate for FixMatch's strong view on tables; None: the paper's Gaussian noise.
        A plug-in that offers the SCARF view (one-shot's tabular_ssl) overrides this."""
        return None

    def local_predictions(self, rows: torch.Tensor) -> torch.Tensor:
        """The local head's class for train rows `rows` (stays on the site)."""
        self.encoder.eval()
        with torch.no_grad():
            return self.state["ssl_head"](self.encode(self.train_batch(rows))).argmax(dim=1).cpu()

    def local_ssl(
        self, phase: str, labeled_rows: torch.Tensor, labels: torch.Tensor, unlabeled_rows: torch.Tensor
    ) -> dict[str, Any]:
        """FixMatch-tab on the site's training rows; an epoch is one pass over the unlabeled rows. The
        weak/strong views take their local statistics from the aligned and unaligned rows (never the
        validation rows)."""
        cfg, head, generator = self.cfg, self.state["ssl_head"], self.generator
        optimizer = self.state["ssl_optimizer"]
        num_classes = head.net.out_features
        views = self.view.fixmatch_views(
            torch.cat([self.rows_of("aligned"), self.rows_of("unaligned")]),
            cfg.mask_rate,
            cfg.noise_std,
            generator,
            self.strong_view_scarf_rate(),
        )
        n_l, n_u = len(labeled_rows), len(unlabeled_rows)
        loss_fn = FixMatchLoss(
            num_classes,
            cfg.fixmatch_threshold,
            cfg.lambda_u,
            cfg.class_balance,
            labeled_marginal=(torch.bincount(labels, minlength=num_classes).float() / n_l).tolist(),
            num_unlabeled=n_u,
        ).to(self.device)
        targets = labels.to(self.device)
        labeled_batches = endless_batches(n_l, min(cfg.batch_size, n_l), generator)
        unlabeled_batch = cfg.unlabeled_ratio * cfg.batch_size
        steps = math.ceil(n_u / unlabeled_batch) if n_u else math.ceil(n_l / cfg.batch_size)
        self.encoder.train()
        epoch_loss = mask_rate = 0.0
        bar = Progress(self.tracker, f"{self.site}: {phase} SSL epoch", cfg.ssl_epochs)
        for epoch in range(cfg.ssl_epochs):
            started = time.monotonic()
            order = torch.randperm(n_u, generator=generator)
            total = masked = 0.0
            for step in range(steps):
                u_pos = order[step * unlabeled_batch : (step + 1) * unlabeled_batch]
                l_pos = next(labeled_batches)
                labeled = views.weak(self.train_batch(labeled_rows[l_pos]))
                weak, strong = views(self.train_batch(unlabeled_rows[u_pos]))
                logits = head(self.encode(self.view.concat([labeled, weak, strong])))
                logits_l, logits_w, logits_s = logits.split([len(l_pos), len(u_pos), len(u_pos)])
                loss = loss_fn(logits_l, targets[l_pos.to(self.device)], logits_w, logits_s, u_pos.to(self.device))
                total += self.finite_loss(loss, f"{phase} SSL", epoch, step)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                masked += loss_fn.last_mask_rate
            epoch_loss, mask_rate = total / steps, masked / steps
            self.tracker.scalar(f"ssl/{phase}_loss", epoch_loss, epoch)
            self.tracker.scalar(f"ssl/{phase}_pseudo_label_rate", mask_rate, epoch)
            bar.step(
                epoch + 1,
                f"loss {epoch_loss:.4f}, pseudo-labels {mask_rate:.2f}, "
                f"{n_u / (time.monotonic() - started):.0f} unlabeled rows/s",
            )
        self.tracker.info(
            f"{self.site}: {phase} SSL done, {cfg.ssl_epochs} epochs on {n_l} labeled + {n_u} unlabeled rows, "
            f"last loss {epoch_loss:.4f}"
        )
        return {"labeled": n_l, "unlabeled": n_u, "ssl_loss": epoch_loss, "pseudo_label_rate": mask_rate}
