"""The local self-supervised pretraining block (SS-VFL's LocalCL, Castiglia, Wang, Patterson, "Self-
Supervised Vertical Federated Learning", Alg. 4, Eq. 2): every site trains its f_k by contrastive
learning on two augmented views of each of its rows, without labels and without communication."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vflflare.config import Settings
from vflflare.models.heads import ProjectionHead
from vflflare.protocol.payload import Payload
from vflflare.protocol.run_context import RunContext
from vflflare.seeding import derive_seed, seeded_init
from vflflare.ssl.losses import NTXentLoss
from vflflare.tracking import Progress


@dataclass
class PretrainSettings(Settings):
    # The paper runs LocalCL for 200 epochs on images and gives no temperature, batch size or projection
    # head; T_un here is pretrain_epochs passes over the site's training rows (our choice: 20 passes,
    # ~3 700 steps on credit default, as good as 50 on credit default and Adult)
    pretrain_epochs: int = 20
    pretrain_batch_size: int = 128  # SCARF's batch size; in-batch negatives need more than B = 32
    pretrain_lr: float = 0.001  # Adam, SCARF's learning rate (the paper gives eta only symbolically)
    # tau of sim(z1, z2) = exp(z1.z2 / tau) in Eq. 1-2; the paper gives no value (our choice)
    cl_temperature: float = 0.5
    # share of a row's features SCARF replaces. SCARF's own default is 0.6 (ScarfCorruption keeps it);
    # 0.3 gave the better linear probe on credit default and Adult at every temperature tried, and 50
    # pretraining epochs no better than 20 (benchmarks/SSVFL_REPORT.md, tuning on a held-out split seed)
    scarf_rate: float = 0.3
    projection_dim: int = 32  # output width of the projection head g(.) used only during pretraining

    # ranges (Settings.validate checks them); 0 pretraining epochs: the ablation without pretraining
    bounds = {"pretrain_epochs": (0, None), "pretrain_batch_size": (2, None), "projection_dim": (1, None)}

    def validate(self) -> None:
        super().validate()
        self.check(0.0 <= self.scarf_rate <= 1.0, "scarf_rate", "must be in [0, 1]")
        self.check(self.cl_temperature > 0, "cl_temperature", "must be > 0")


class ContrastivePretrainSite:
    steps = ("contrastive_pretrain",)

    def contrastive_pretrain(self, payload: Payload) -> Payload:
        """Step: LocalCL, then the pretraining stats (numbers: control, not payload)."""
        return {"pretrain": self.pretrain()}

    def pretext(self, rows: torch.Tensor, generator: torch.Generator) -> tuple[Any, nn.Module, nn.Module]:
        """(views, loss, head on f_k) of the pretext task; SS-VFL's LocalCL: two contrastive views, NT-Xent,
        a projection head. A plug-in with another pretext (VFLHLP's SCARF) overrides this."""
        cfg = self.cfg
        views = self.view.contrastive_views(rows, cfg.scarf_rate, generator)
        loss_fn = NTXentLoss(temperature=cfg.cl_temperature)
        with seeded_init(derive_seed(self.seed, "projection_head")):
            projection = self.on_device(ProjectionHead(cfg.rep_dim, cfg.projection_dim))
        return views, loss_fn, projection

    def pretrain(self) -> dict[str, Any]:
        """Train f_k on the pretext task (`pretext`; by default a projection head g and the in-batch NT-Xent
        loss on two contrastive views of each row, for tables SCARF corruptions at rate cfg.scarf_rate).

        Rows: every local training row (aligned or not, labeled or not) except the validation rows;
        test rows never. The corruption's replacement values are drawn from the same rows. Our choices
        where the paper is open: g = ProjectionHead(rep_dim -> projection_dim), Adam at cfg.pretrain_lr,
        cfg.pretrain_epochs passes of batches of cfg.pretrain_batch_size. g is discarded afterwards."""
        cfg = self.cfg
        rows = torch.cat([self.rows_of("aligned"), self.rows_of("unaligned")])
        n = len(rows)
        if n < 2:
            raise ValueError(f"{self.site}: contrastive pretraining needs at least 2 training rows, got {n}")
        generator = torch.Generator().manual_seed(derive_seed(self.seed, "contrastive"))
        views, loss_fn, projection = self.pretext(rows, generator)
        optimizer = torch.optim.Adam(
            [*self.encoder.parameters(), *projection.parameters()], lr=cfg.pretrain_lr, weight_decay=cfg.weight_decay
        )
        batch = min(cfg.pretrain_batch_size, n)
        steps_per_epoch = n // batch  # full batches only: a trailing batch of 1 row has no negatives
        self.encoder.train()
        epoch_loss, steps = float("nan"), 0
        bar = Progress(self.tracker, f"{self.site}: contrastive pretraining epoch", cfg.pretrain_epochs)
        for epoch in range(cfg.pretrain_epochs):
            started = time.monotonic()
            order = torch.randperm(n, generator=generator)
            total = 0.0
            for step in range(steps_per_epoch):
                view1, view2 = views(self.train_batch(rows[order[step * batch : (step + 1) * batch]]))
                loss = loss_fn(projection(self.encode(view1)), projection(self.encode(view2)))
                total += self.finite_loss(loss, "contrastive pretraining", epoch, step)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                steps += 1
            epoch_loss = total / steps_per_epoch
            self.tracker.scalar("pretrain/contrastive_loss", epoch_loss, epoch)
            bar.step(
                epoch + 1, f"loss {epoch_loss:.4f}, {steps_per_epoch * batch / (time.monotonic() - started):.0f} rows/s"
            )
        self.tracker.info(
            f"{self.site}: contrastive pretraining done, {cfg.pretrain_epochs} epochs ({steps} steps of {batch}) "
            f"on {n} local training rows, last loss {epoch_loss:.4f}"
        )
        return {"rows": n, "epochs": cfg.pretrain_epochs, "steps": steps, "contrastive_loss": epoch_loss}


def local_pretraining(ctx: RunContext) -> None:
    """LocalCL at every site in parallel. Request and reply carry no tensors (the reply holds the
    site's pretraining stats as numbers), so nothing counts as communication."""
    net, info = ctx.net, ctx.info
    with net.ledger.phase("local_pretraining"):
        replies = net.exchange("contrastive_pretrain", {s: {} for s in net.sites})
    stats = {site: reply.get("pretrain", {}) for site, reply in replies.items()}
    info["pretrain_steps"] = {site: int(s.get("steps", 0)) for site, s in stats.items()}
    info["pretrain_rows"] = {site: int(s.get("rows", 0)) for site, s in stats.items()}
