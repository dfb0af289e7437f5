"""VFLHLP (Li, Guo, Jiao, Huang, Yan, Yang, "Vertical Federated Learning Hybrid Local Pre-training",
paper 002): the active party (the site that owns the labels, for all of its local rows) and the passive
parties pretrain locally, then split-NN on the aligned rows uses what they learnt.

  (1) the active party trains a local model h^1(Theta^1) + f(Theta^0) on all its labeled local rows (Eq. 4);
  (2) each passive party pretrains h^k(Theta^k) by SCARF on all its local rows (Eq. 5-6), in parallel;
  (3) split NN on the aligned labeled rows (Alg. 1): passive bottoms start from Theta^k, the active bottom
      theta^1 and the head theta^0 start fresh and are pulled towards Theta^1 and Theta^0 by
      L = L_vfl + beta * L_cons, L_cons = 0.5 (|theta^1 - Theta^1|^2 + |theta^0_s - Theta^0|^2) (Eq. 7-8).

Variants (the paper's ablation and baseline, Sec. 5): vflhlp_a (only (1) and the constraint), vflhlp_p
(only (2)), local_a (only (1): the active party alone, no federation, the floor VFL must beat).

Our choices where the paper is open, written down:
- theta^0_s, "the sub-model of the prediction for the active party", is the head's first-layer weights on
  the active party's representation columns plus every other head parameter (the bias; deeper layers
  when classifier_hidden > 0), so that it has Theta^0's shape.
- beta: the paper gives no value; our default 0.1 was chosen on validation AUC (never test) on credit
  default, see benchmarks/VFLHLP_REPORT.md.
- (1) starts Theta^1 from the active bottom's initial weights, trains with Adam at pretrain_lr in batches
  of pretrain_batch_size for at most active_epochs epochs, keeping the best validation epoch
  (split_patience): the validation rows are aligned rows the active party also holds.
- (2) uses the encoder output as z (the paper: "pass both X and X~ through the encoder"), SCARF's own
  corruption rate 0.6 and temperature 1.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vflflare.algorithms.blocks.contrastive_pretraining import ContrastivePretrainSite, PretrainSettings
from vflflare.algorithms.blocks.split_nn import (
    SplitNNLabel,
    SplitNNSettings,
    SplitNNSite,
    split_nn_communications,
    train_split_nn,
)  # fmt: skip
from vflflare.algorithms.plugin import Algorithm
from vflflare.config import SERVER, JobConfig, Settings
from vflflare.metrics import score
from vflflare.models.heads import MLPHead
from vflflare.privacy.defenses import randomized_response
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.label_party import LabelParty
from vflflare.protocol.party_setup import Aligned
from vflflare.protocol.payload import Payload
from vflflare.protocol.transport import Transport
from vflflare.registry import register
from vflflare.seeding import derive_seed, seeded_init
from vflflare.ssl.augment import TwoViews
from vflflare.ssl.losses import ScarfInfoNCELoss

# variant -> (the active party pretrains and constrains, the passive parties pretrain, split NN runs)
VARIANTS = {
    "vflhlp": (True, True, True),
    "vflhlp_a": (True, False, True),
    "vflhlp_p": (False, True, True),
    "local_a": (True, False, False),
}


def consistency_loss(current: list[torch.Tensor], pretrained: list[torch.Tensor]) -> torch.Tensor:
    """0.5 * sum |theta - Theta|^2 over paired tensors (one half of Eq. 8); Theta is a constant."""
    return 0.5 * sum(((c - p.detach()) ** 2).sum() for c, p in zip(current, pretrained, strict=True))


def active_submodel(head: nn.Module, start: int, width: int) -> list[torch.Tensor]:
    """theta^0_s: the head's parameters that act on the active party's columns [start, start + width) of
    the concatenated representations (first-layer weight columns; every later parameter whole)."""
    first, *rest = list(head.parameters())
    return [first[:, start : start + width], *rest]


@dataclass
class VFLHLPSettings(Settings):
    variant: str = "vflhlp"  # vflhlp or an ablation of it (module docstring)
    beta: float = 0.1  # Eq. 7; not given by the paper (module docstring)
    active_epochs: int = 100  # (1): at most this many passes over the active party's labeled rows
    scarf_temperature: float = 1.0  # tau of Eq. 6 (SCARF's default; the paper gives none)

    bounds = {"active_epochs": (1, None)}  # ranges: Settings.validate checks them

    def validate(self) -> None:
        super().validate()
        self.check(self.variant in VARIANTS, "variant", f"must be one of {sorted(VARIANTS)}")
        self.check(self.beta >= 0, "beta", "must be >= 0 (the weight of L_cons in Eq. 7)")
        self.check(self.scarf_temperature > 0, "scarf_temperature", "must be > 0")


@dataclass
class VFLHLPConfig(VFLHLPSettings, PretrainSettings, SplitNNSettings, JobConfig):
    scarf_rate: float = 0.6  # SCARF's corruption rate (the paper gives none)

    def validate(self) -> None:
        super().validate()
        self.check(
            self.label_owner != SERVER,
            "label_owner",
            "must be a site: VFLHLP's active party is the site that holds the labels of all its local "
            "rows, aligned or not (split with `vflflare split --label-owner SITE --active-site-labels`)",
        )


class VFLHLPSite(SplitNNSite, ContrastivePretrainSite, FeatureParty):
    steps = ("local_pretrain",)

    def local_pretrain(self, payload: Payload) -> Payload:
        """Step (1) at the active site, (2) at a passive one; `role` "none" does nothing (ablations)."""
        role = payload["role"]
        if role == "active":
            return self.supervised_pretrain()
        return {"pretrain": self.pretrain()} if role == "passive" else {}

    # ------------------------------------------------------------------ (2) SCARF, Eq. 5-6
    def pretext(self, rows: torch.Tensor, generator: torch.Generator) -> tuple[Any, nn.Module, nn.Module]:
        corrupt = self.view.contrastive_views(rows, self.cfg.scarf_rate, generator).transform_a
        return TwoViews(lambda batch: batch, corrupt), ScarfInfoNCELoss(self.cfg.scarf_temperature), nn.Identity()

    # ------------------------------------------------------------------ (1) supervised, Eq. 4
    def supervised_pretrain(self) -> Payload:
        """Train Theta^1, Theta^0 on the active party's labeled local rows; keep the best validation epoch
        as state 'anchor_encoder' / 'anchor_head'. Replies with its stats and its val/test metrics: the
        local-only model scored on the aligned validation and test rows (Local-A)."""
        cfg, label = self.cfg, self.colocated
        if label is None:
            raise RuntimeError(f"site '{self.site}': VFLHLP's supervised pretraining runs at the label-owning site")
        rows, labels = self.local_labeled_rows()
        encoder = copy.deepcopy(self.encoder)
        with seeded_init(derive_seed(self.seed, "local_predictor")):
            head = self.on_device(MLPHead(cfg.representation_width, label.num_classes, cfg.classifier_hidden))
        optimizer = torch.optim.Adam(
            [*encoder.parameters(), *head.parameters()], lr=cfg.pretrain_lr, weight_decay=cfg.weight_decay
        )
        generator = torch.Generator().manual_seed(derive_seed(self.seed, "supervised"))
        best, since_best, epochs, best_state = -math.inf, 0, 0, None
        while epochs < cfg.active_epochs and since_best < cfg.split_patience:
            order = torch.randperm(len(rows), generator=generator)
            encoder.train(), head.train()
            losses = []
            for start in range(0, len(rows), cfg.pretrain_batch_size):
                batch = order[start : start + cfg.pretrain_batch_size]
                inputs = self.train_batch(rows[batch])
                loss = F.cross_entropy(
                    head(encoder(*(t.to(self.device) for t in inputs))), labels[batch].to(self.device)
                )
                losses.append(
                    self.finite_loss(loss, "supervised pretraining", epochs, start // cfg.pretrain_batch_size)
                )
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            ((metric, value),) = self.local_scores(encoder, head, ["val"]).items()
            self.tracker.scalar("pretrain/supervised_loss", float(np.mean(losses)), epochs)
            self.tracker.scalar(f"pretrain/{metric}", value, epochs)
            epochs += 1
            if value > best:
                best, since_best, best_state = value, 0, (copy.deepcopy(encoder), copy.deepcopy(head))
            else:
                since_best += 1
        self.state["anchor_encoder"], self.state["anchor_head"] = best_state
        self.tracker.info(
            f"{self.site}: supervised pretraining on {len(rows)} labeled local rows stopped after "
            f"{epochs} epochs, best {metric} {best:.4f}"
        )
        return {
            "pretrain": {"rows": len(rows), "epochs": epochs},
            "metrics": self.local_scores(*best_state, ["val", "test"]),
        }

    def local_labeled_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions and labels of the active party's training rows with a label: its aligned labeled
        rows and its own unaligned rows, matched to its labels by ID here at the site. Not the validation
        rows, nor aligned rows the job leaves unlabeled (labeled_fraction)."""
        tables = self.colocated.tables
        label_of = dict(zip(tables.train_ids, tables.train_labels.tolist()))
        ids = self.view.train_ids
        own = np.setdiff1d(self.rows_of("unaligned").numpy(), self.rows_of("aligned_unlabeled").numpy())
        local = [int(r) for r in own if ids[r] in label_of]
        if not local:
            raise ValueError(
                f"site '{self.site}': VFLHLP's active party needs the labels of its unaligned rows too, but its "
                f"labels ({tables.train_source}) cover none of its {len(own)} unaligned training rows; give every "
                f"row of its train.csv a label there, e.g. `vflflare split --label-owner {self.site} "
                f"--active-site-labels`"
            )
        rows = np.concatenate([self.rows_of("aligned").numpy(), local])
        labels = torch.as_tensor([label_of[ids[r]] for r in rows])
        if self.cfg.label_dp_epsilon > 0:  # label DP covers pretraining too: the aligned rows' randomized labels
            # as the label party holds them, the site's own rows through randomized response as well
            label = self.colocated
            own = randomized_response(
                labels[len(self.rows_of("aligned")) :],
                label.num_classes,
                self.cfg.label_dp_epsilon,
                label.private.generator("label-dp:local"),
            )
            labels = torch.cat([label.part_labels("aligned"), own])
        return torch.as_tensor(rows), labels

    def local_scores(self, encoder: nn.Module, head: nn.Module, parts: list[str]) -> dict[str, float]:
        """{'<part>_<metric>'} of the local model on the aligned validation / test rows."""
        label, scores = self.colocated, {}
        encoder.eval(), head.eval()
        with torch.no_grad():
            for part in parts:
                batch = self.part(part)
                probs = F.softmax(head(encoder(*(t.to(self.device) for t in batch))), dim=1).cpu().numpy()
                name, value = score(probs, label.part_labels(part).numpy(), label.num_classes)
                scores[f"{part}_{name}"] = value
        return scores

    # ------------------------------------------------------------------ (3) the active bottom's half of L_cons
    def split_penalty(self) -> torch.Tensor | None:
        if "anchor_encoder" not in self.state or self.cfg.beta == 0:
            return None
        anchor = self.state["anchor_encoder"]
        return self.cfg.beta * consistency_loss(list(self.encoder.parameters()), list(anchor.parameters()))


class VFLHLPLabel(SplitNNLabel, LabelParty):
    def split_penalty(self, classifier: nn.Module) -> torch.Tensor | None:
        """The head's half of L_cons: theta^0_s towards Theta^0, which the hosting site trained in (1)."""
        site = self.colocated
        if site is None or "anchor_head" not in site.state or self.cfg.beta == 0:
            return None
        width = self.cfg.representation_width
        sub = active_submodel(classifier, self.sites.index(self.cfg.label_owner) * width, width)
        anchor = [p.cpu() for p in site.state["anchor_head"].parameters()]
        return self.cfg.beta * consistency_loss(sub, anchor)


@register
class VFLHLP(Algorithm):
    name = "vflhlp"
    job_name = "vflhlp"
    Config, Site, Label = VFLHLPConfig, VFLHLPSite, VFLHLPLabel
    phases = ("local_pretraining", "split_training", "evaluation")
    # the active party's step (1) leaves the aligned unlabeled rows out; it holds its unaligned rows' labels
    setup = Aligned(aligned_unlabeled=True, active_site_labels=True)

    def run(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        cfg = self.cfg
        active, passive, federated = VARIANTS[cfg.variant]
        roles = {
            s: ("active" if active else "none") if s == cfg.label_owner else ("passive" if passive else "none")
            for s in net.sites
        }
        with net.ledger.phase("local_pretraining"):  # (1) and (2), in parallel, nothing leaves a site
            replies = net.exchange("local_pretrain", {s: {"role": role} for s, role in roles.items()})
        self.info["pretrain"] = {s: r["pretrain"] for s, r in replies.items() if "pretrain" in r}
        local_a = replies[cfg.label_owner].get("metrics", {})
        if not federated:
            return local_a
        self.info["local_a"] = local_a
        return train_split_nn(self.context(net, label), rows["aligned_train"], epochs=cfg.split_epochs)  # (3)

    def expected_communications(self, sites: list[str], rows: dict[str, int]) -> dict[str, dict[str, int]]:
        if not VARIANTS[self.cfg.variant][2]:
            return super().expected_communications(sites, rows)
        feature, label_extra = split_nn_communications(
            self.cfg, rows["aligned_train"], self.info["split_epochs"], False
        )
        return self.per_site(sites, feature, label_extra)
