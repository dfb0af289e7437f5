"""FedHSSL (He et al., "A Hybrid Self-Supervised Learning Framework for Vertical Federated Learning",
Algorithm 1), and its ablations as configs of the same flow (`variant`):

| variant          | step 1 cross-party SSL | step 2 local SSL      | step 3 PMA | finetuned towers |
|------------------|------------------------|-----------------------|------------|------------------|
| fedhssl          | yes                    | guided by f_c (Eq. 6) | yes        | f_c, f_l         |
| fedgssl          | yes                    | guided by f_c (Eq. 6) | no         | f_c, f_l         |
| fedcssl          | yes                    | no                    | no         | f_c              |
| fedlocalssl      | no                     | plain (gamma = 0)     | no         | f_l              |
| fedlocalssl_pma  | no                     | plain (gamma = 0)     | yes        | f_l              |
| fedsplitnn       | no                     | no                    | no         | f_l              |

`finetune_towers: local` gives the starred variants of Table V (FedGSSL*, FedHSSL*). `ssl_method` picks
SimSiam, BYOL or MoCo (Table II, ssl/methods.py).

Choices where the paper is open, ours:
- With the labels on the coordinator no site is party 1; the first site in the job's site order plays the
  active party in Eq. 5. With a label-owning site, it is the active party.
- In step 1 every party sends its online z_c = f_c(x) (Alg. 1 line 5), whatever the method; the EMA target
  encoder of BYOL and MoCo serves step 2. MoCo's negatives in Eq. 5 are a queue of received z_c.
- MoCo's guidance term in Eq. 6 takes its negatives from the local queue.
- Pretraining uses Adam at `pretrain_lr` (the paper gives no optimiser); PMA also averages the local
  projector, which sits between f_lt and h_l during pretraining.
- Step 2 runs on every training row of the site except the validation rows (test rows never).
- Cross-party rows: every aligned training row except the validation rows, labeled or not.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from vflflare.algorithms.blocks.cross_party_ssl import CrossPartySite, cross_party_communications, cross_party_ssl
from vflflare.algorithms.blocks.partial_aggregation import PartialAggregationSite, partial_model_aggregation
from vflflare.algorithms.blocks.split_nn import SplitNNSettings, SplitNNSite, split_nn_communications, train_split_nn
from vflflare.algorithms.plugin import Algorithm
from vflflare.algorithms.vanilla import SplitNNLabelParty
from vflflare.config import SERVER, JobConfig, Settings
from vflflare.models.heads import Projector
from vflflare.models.two_tower import TOWERS, TwoTower, top_layers
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.party_setup import Aligned
from vflflare.protocol.payload import Payload
from vflflare.protocol.transport import Transport
from vflflare.registry import register
from vflflare.seeding import derive_seed, seeded_init
from vflflare.ssl.losses import Predictor, momentum_update, target_copy
from vflflare.ssl.losses.hybrid import cross_party_loss, guided_local_loss
from vflflare.ssl.methods import SSL_METHODS, SSLMethod, make_pair_loss
from vflflare.tracking import Progress

_PROGRESS_EVERY_S = 30.0

# variant -> (pretraining steps, towers finetuned)
VARIANTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "fedhssl": (("cross", "local", "pma"), ("cross", "local")),
    "fedgssl": (("cross", "local"), ("cross", "local")),
    "fedcssl": (("cross",), ("cross",)),
    "fedlocalssl": (("local",), ("local",)),
    "fedlocalssl_pma": (("local", "pma"), ("local",)),
    "fedsplitnn": ((), ("local",)),
}


@dataclass
class HybridSSLSettings(Settings):
    variant: str = "fedhssl"  # fedhssl or one of the paper's ablations (module docstring)
    ssl_method: str = "simsiam"  # simsiam | byol | moco
    global_iterations: int = 40  # paper: 40 (10 for NUSWIDE), 1 epoch of step 1 and of step 2 each
    pretrain_batch_size: int = 512  # paper
    pretrain_lr: float = 0.001  # Adam; our choice
    gamma: float = 0.5  # Eq. 6, paper
    cross_local_updates: int = 1  # optimiser steps per received batch in step 1 (paper's Fig. 7)
    scarf_rate: float = 0.3  # step 2's table views: 30 % of features replaced (paper, after SCARF)
    projector: list[int] = field(default_factory=list)  # [] = the method's (Appendix B)
    predictor_hidden: int = 128  # the 2-FC predictor [128, 512] of SimSiam and BYOL (Appendix B)
    moco_temperature: float = 0.5  # Appendix B
    moco_queue: int = 4096  # Appendix B
    pma_top_layers: int = 1  # f_lt: the top layers of f_l (Table III: 1 for the tabular MLPs)
    finetune_towers: str = ""  # "" = the variant's; local = FedGSSL* / FedHSSL*; cross; both
    # ISO (Eq. 7) strength lambda_p on what the active party shares while pretraining: its z_c and its PMA
    # contribution (Section VI-B); 0 = off
    iso_pretrain: float = 0.0
    # finetuning learning rates tried, each from the pretrained towers; the one with the best validation
    # metric is kept (Appendix B's grid; the paper does not say on which split it selects: validation here)
    finetune_lrs: list[float] = field(default_factory=lambda: [0.005, 0.01, 0.03])

    # ranges (Settings.validate checks them); 0 global iterations: finetuning only (fedsplitnn)
    bounds = {
        "global_iterations": (0, None),
        "pretrain_batch_size": (2, None),
        "cross_local_updates": (1, None),
        "predictor_hidden": (1, None),
        "moco_queue": (1, None),
        "pma_top_layers": (1, None),
        "gamma": (0, None),
        "iso_pretrain": (0, None),
    }

    def validate(self) -> None:
        super().validate()
        self.check(self.variant in VARIANTS, "variant", f"must be one of {list(VARIANTS)}")
        self.check(self.ssl_method in SSL_METHODS, "ssl_method", f"must be one of {list(SSL_METHODS)}")
        self.check(self.pretrain_lr > 0, "pretrain_lr", "must be > 0")
        self.check(0.0 <= self.scarf_rate <= 1.0, "scarf_rate", "must be in [0, 1]")
        self.check(all(isinstance(w, int) and w >= 1 for w in self.projector), "projector", "must hold positive widths")
        self.check(self.moco_temperature > 0, "moco_temperature", "must be > 0")
        self.check(
            bool(self.finetune_lrs) and all(lr > 0 for lr in self.finetune_lrs),
            "finetune_lrs",
            "must hold one or more learning rates > 0",
        )
        self.check(self.finetune_towers in ("", "both", *TOWERS), "finetune_towers", "must be '', both, cross or local")

    @property
    def method(self) -> SSLMethod:
        return SSL_METHODS[self.ssl_method]

    @property
    def pretraining(self) -> tuple[str, ...]:
        return VARIANTS[self.variant][0]

    @property
    def towers(self) -> tuple[str, ...]:
        if self.finetune_towers:
            return TOWERS if self.finetune_towers == "both" else (self.finetune_towers,)
        return VARIANTS[self.variant][1]

    @property
    def projector_widths(self) -> list[int]:
        return list(self.projector) or list(self.method.projector)


@dataclass
class FedHSSLConfig(HybridSSLSettings, SplitNNSettings, JobConfig):
    def validate(self) -> None:
        super().validate()
        self.check(
            not self.checkpoint, "checkpoint", "is not supported by fedhssl yet (its pretraining has no save points)"
        )

    @property
    def representation_width(self) -> int:
        return self.rep_dim * len(self.towers)

    @property
    def gradient_passes(self) -> int:
        """Finetuning runs split NN once per learning rate, and the best once more when it was not the last."""
        return self.split_epochs * (len(self.finetune_lrs) + (len(self.finetune_lrs) > 1))


class HybridSSLSite(CrossPartySite, PartialAggregationSite, SplitNNSite, FeatureParty):
    """A FedHSSL party: f_c with its projector and predictor h_c, f_l with its own and h_l (and, for BYOL and
    MoCo, an EMA target of f_l and its projector); `encoder` is the two-tower model finetuned after."""

    steps = ("guided_local_ssl", "keep_pretrained", "reset_to_pretrained")
    _cross_pending: tuple[Any, torch.Tensor] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg, method = self.cfg, self.cfg.method
        spec = cfg.image_model if self.view.modality == "image" else cfg.model
        with seeded_init(derive_seed(self.seed, "local_encoder")):
            local = self.view.encoder(spec, cfg.rep_dim)
        self.state["encoder"] = self.on_device(TwoTower(self.state["encoder"], local, cfg.towers))
        widths = cfg.projector_widths
        for tower in TOWERS:
            with seeded_init(derive_seed(self.seed, f"{tower}_head")):
                projector = Projector(cfg.rep_dim, widths)
                predictor = Predictor(widths[-1], cfg.predictor_hidden) if method.mlp_predictor else nn.Identity()
            online = nn.ModuleDict({"projector": projector, "predictor": predictor})
            self.state[f"{tower}_head"] = self.on_device(online)
            self.state[f"{tower}_loss"] = self._pair_loss(tower)
        if method.target_momentum is not None:
            self.state["local_target"] = target_copy(self._local_online())
        self.state["cross_optimizer"] = torch.optim.Adam(
            [*self.encoder.cross.parameters(), *self.state["cross_head"].parameters()],
            lr=cfg.pretrain_lr,
            weight_decay=cfg.weight_decay,
        )
        self.state["local_optimizer"] = torch.optim.Adam(
            [*self.encoder.local.parameters(), *self.state["local_head"].parameters()],
            lr=cfg.pretrain_lr,
            weight_decay=cfg.weight_decay,
        )

    def _pair_loss(self, tower: str) -> Any:
        cfg = self.cfg
        loss = make_pair_loss(
            cfg.method,
            cfg.projector_widths[-1],
            cfg.moco_temperature,
            cfg.moco_queue,
            derive_seed(self.seed, f"{tower}_queue"),
        )
        return self.on_device(loss) if isinstance(loss, nn.Module) else loss

    # ------------------------------------------------------------------ towers
    def project(self, tower: str, batch: Any) -> torch.Tensor:
        """z = projector(f(x)) of one tower."""
        inputs = [t.to(self.device) for t in batch]
        return self.state[f"{tower}_head"]["projector"](getattr(self.encoder, tower)(*inputs))

    def predict(self, tower: str, z: torch.Tensor) -> torch.Tensor:
        return self.state[f"{tower}_head"]["predictor"](z)

    # ------------------------------------------------------------------ step 1: cross-party SSL
    def cross_rows(self) -> torch.Tensor:
        return torch.cat([self.rows_of("aligned"), self.rows_of("aligned_unlabeled")])

    def cross_step(self, positions: np.ndarray, iso_strength: float = 0.0) -> np.ndarray:
        rows = self.cross_rows()
        if len(positions) and positions.max() >= len(rows):
            raise ValueError(
                f"site '{self.site}': cross-party row {positions.max()} is outside its {len(rows)} "
                f"aligned training rows"
            )
        batch = self.train_batch(rows[torch.as_tensor(positions)])
        self.encoder.cross.train()
        self.state["cross_head"].train()
        z = self.project("cross", batch)
        self._cross_pending = (batch, z)
        return self.with_iso(z.detach().cpu(), iso_strength).numpy().astype(np.float32)

    def cross_update(self, targets: dict[str, np.ndarray]) -> float:
        """Eq. 5 on the last forward against the received z_c, cfg.cross_local_updates optimiser steps."""
        if self._cross_pending is None:
            raise RuntimeError(f"site '{self.site}': cross-party targets without a preceding forward")
        batch, z = self._cross_pending
        received = [torch.as_tensor(np.asarray(targets[s], dtype=np.float32), device=z.device) for s in sorted(targets)]
        pair_loss, optimizer = self.state["cross_loss"], self.state["cross_optimizer"]
        first = None
        for update in range(self.cfg.cross_local_updates):
            if update > 0:
                z = self.project("cross", batch)
            loss = cross_party_loss(pair_loss, self.predict("cross", z), received)
            value = self.finite_loss(loss, "cross-party SSL", 0, update)
            first = value if first is None else first
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if hasattr(pair_loss, "enqueue"):
            for key in received:
                pair_loss.enqueue(key)
        self._cross_pending = None
        return first

    # ------------------------------------------------------------------ step 2: cross-party-guided local SSL
    def guided_local_ssl(self, payload: Payload) -> Payload:
        """One epoch of Eq. 6 over the site's training rows (all but validation), updating f_l and h_l only."""
        cfg, method = self.cfg, self.cfg.method
        iteration = int(payload.get("iteration", 0))
        gamma = cfg.gamma if "cross" in cfg.pretraining else 0.0
        rows = torch.cat([self.rows_of("aligned"), self.rows_of("unaligned")])
        generator = torch.Generator().manual_seed(derive_seed(self.seed, f"local_ssl:{iteration}"))
        views = self.view.contrastive_views(rows, cfg.scarf_rate, generator)
        batch_size = min(cfg.pretrain_batch_size, len(rows))
        steps = max(1, len(rows) // batch_size)
        order = torch.randperm(len(rows), generator=generator)
        pair_loss, optimizer = self.state["local_loss"], self.state["local_optimizer"]
        target = self.state.get("local_target")
        self.encoder.local.train()
        self.state["local_head"].train()
        self.encoder.cross.eval()
        self.state["cross_head"].eval()
        started, total = time.monotonic(), 0.0
        reported = started
        for step in range(steps):
            v1, v2 = views(self.train_batch(rows[order[step * batch_size : (step + 1) * batch_size]]))
            z1, z2 = self.project("local", v1), self.project("local", v2)
            with torch.no_grad():
                t1, t2 = (z1, z2) if target is None else (self._target(target, v1), self._target(target, v2))
                c1, c2 = (self.project("cross", v1), self.project("cross", v2)) if gamma > 0 else (t1, t2)
            loss = guided_local_loss(
                pair_loss, (self.predict("local", z1), self.predict("local", z2)), (t1, t2), (c1, c2), gamma
            )
            total += self.finite_loss(loss, "guided local SSL", iteration, step)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if target is not None:
                momentum_update(self._local_online(), target, method.target_momentum)
            if hasattr(pair_loss, "enqueue"):
                pair_loss.enqueue(t1)
                pair_loss.enqueue(t2)
            if time.monotonic() - reported > _PROGRESS_EVERY_S:  # a long epoch still tells liveness it is alive
                reported = time.monotonic()
                self.tracker.scalar("local_ssl/running_loss", total / (step + 1), iteration * steps + step)
        loss = total / steps
        self.tracker.scalar("local_ssl/loss", loss, iteration)
        self.tracker.info(
            f"{self.site}: guided local SSL, global iteration {iteration + 1}: loss {loss:.4f}, "
            f"{steps * batch_size / (time.monotonic() - started):.0f} rows/s"
        )
        return {"loss": loss, "rows": len(rows)}

    def _local_online(self) -> nn.Sequential:
        """f_l followed by its projector: the module the EMA target copies."""
        return nn.Sequential(self.encoder.local, self.state["local_head"]["projector"])

    def _target(self, target: nn.Sequential, batch: Any) -> torch.Tensor:
        """z~ = the EMA projector of the EMA f_l."""
        encoder, projector = target
        return projector(encoder(*[t.to(self.device) for t in batch]))

    # ------------------------------------------------------------------ finetuning from the pretrained towers
    def keep_pretrained(self, payload: Payload) -> Payload:
        self.state["pretrained"] = copy.deepcopy(self.encoder.state_dict())
        return {}

    def reset_to_pretrained(self, payload: Payload) -> Payload:
        """Start a finetuning run at learning rate payload["lr"] from the pretrained towers."""
        self.encoder.load_state_dict(self.state["pretrained"])
        self.state["split_optimizer"] = torch.optim.Adam(
            self.encoder.parameters(), lr=float(payload["lr"]), weight_decay=self.cfg.weight_decay
        )
        return {}

    # ------------------------------------------------------------------ step 3: PMA
    def shared_module(self) -> nn.Module:
        """f_lt o h_l: the top layers of f_l, the local projector and the local predictor."""
        local = self.encoder.local
        top = {name.replace(".", "/"): local.get_submodule(name) for name in top_layers(local, self.cfg.pma_top_layers)}
        return nn.ModuleDict({"top": nn.ModuleDict(top), "head": self.state["local_head"]})


class HybridSSLLabel(SplitNNLabelParty):
    channels = {"finetune_lr": "step"}

    def finetune_lr(self, lr: float) -> None:
        self.state["finetune_lr"] = float(lr)

    def split_begin(self, keep_classifier: bool) -> None:
        super().split_begin(keep_classifier)
        for group in self.state["split_optimizer"].param_groups:
            group["lr"] = self.state.get("finetune_lr", self.cfg.lr)


@register
class FedHSSL(Algorithm):
    name = "fedhssl"
    job_name = "fedhssl"
    Config, Site, Label = FedHSSLConfig, HybridSSLSite, HybridSSLLabel
    phases = ("cross_ssl", "local_ssl", "pma", "finetune", "evaluation")
    setup = Aligned(aligned_unlabeled=True)

    def run(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        cfg, steps = self.cfg, self.cfg.pretraining
        active = net.sites[0] if cfg.label_owner == SERVER else cfg.label_owner
        rng = np.random.default_rng(derive_seed(cfg.seed, "cross-order"))
        n_cross = self.cross_rows(rows)
        iterations = cfg.global_iterations if steps else 0
        ctx = self.context(net, label)
        bar = Progress(self.tracker, "FedHSSL pretraining iteration", iterations)
        for iteration in range(iterations):
            if "cross" in steps:  # step 1: cross-party SSL on the aligned rows
                cross_party_ssl(
                    ctx,
                    active,
                    n_cross,
                    batch_size=cfg.pretrain_batch_size,
                    rng=rng,
                    iteration=iteration,
                    iso_strength=cfg.iso_pretrain,
                )
            if "local" in steps:  # step 2: cross-party-guided local SSL on every local row
                with net.ledger.phase("local_ssl"):
                    net.exchange("guided_local_ssl", {s: {"iteration": iteration} for s in net.sites})
            if "pma" in steps:  # step 3: partial model aggregation of f_lt o h_l
                partial_model_aggregation(ctx, iso={active: cfg.iso_pretrain})
            bar.step(iteration + 1)
        return self.finetune(net, label, rows)

    def finetune(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        """Split-NN over the labeled aligned rows from the pretrained towers, once per learning rate of
        cfg.finetune_lrs; the best on validation is run last (again, if it was not the last), so its model
        is the one the parties keep."""
        net.step("keep_pretrained", {s: {} for s in net.sites})
        lrs = list(self.cfg.finetune_lrs)
        scores: dict[float, float] = {}
        for lr in lrs:
            metrics = self._finetune_at(net, label, rows, lr)
            scores[lr] = next(v for k, v in metrics.items() if k.startswith("val_"))
        best = max(lrs, key=lambda lr: scores[lr])  # the first of equals
        if best != lrs[-1]:
            metrics = self._finetune_at(net, label, rows, best)
        self.info.update(finetune_lr=best, finetune_val={str(lr): s for lr, s in scores.items()})
        self.tracker.info(f"finetuning: validation {scores}, kept lr {best}")
        return metrics

    def _finetune_at(self, net: Transport, label: Any, rows: dict[str, int], lr: float) -> dict[str, float]:
        net.step("reset_to_pretrained", {s: {"lr": lr} for s in net.sites})
        label.finetune_lr(lr)
        metrics = train_split_nn(
            self.context(net, label), rows["aligned_train"], epochs=self.cfg.split_epochs, phase="finetune"
        )
        self.info.setdefault("finetune_epochs", []).append(self.info["split_epochs"])
        return metrics

    @staticmethod
    def cross_rows(rows: dict[str, int]) -> int:
        return rows["aligned_train"] + rows.get("aligned_unlabeled", 0)

    def expected_communications(self, sites: list[str], rows: dict[str, int]) -> dict[str, dict[str, int]]:
        cfg, steps = self.cfg, self.cfg.pretraining
        iterations = cfg.global_iterations if steps else 0
        up, down = 0, 0
        if "cross" in steps:
            c_up, c_down = cross_party_communications(self.cross_rows(rows), cfg.pretrain_batch_size)
            up, down = up + iterations * c_up, down + iterations * c_down
        if "pma" in steps:
            up, down = up + iterations, down + iterations
        runs = [
            split_nn_communications(cfg, rows["aligned_train"], epochs, False)
            for epochs in self.info["finetune_epochs"]
        ]
        feature = (up + sum(f[0] for f, _ in runs), down + sum(f[1] for f, _ in runs))
        label_extra = (sum(e[0] for _, e in runs), sum(e[1] for _, e in runs))
        return self.per_site(sites, feature, label_extra)
