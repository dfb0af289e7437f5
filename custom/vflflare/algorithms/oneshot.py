"""One-shot VFL (Sun et al., "Communication-Efficient Vertical Federated Learning with Limited
Overlapping Samples", ICCV 2023, Alg. 1): two uploads and one download per site.

    representations up -> partial gradients down (with C) -> local k-means on the gradients gives the
    aligned rows temporary labels, local FixMatch-tab SSL on aligned + unaligned rows -> representations
    up -> the label party trains the classifier

`tabular_ssl = "scarf"` (benchmarks/ONESHOT_TABLES.md, issue 40) adds a local contrastive warm start of f_k
before the first upload (SS-VFL's LocalCL, no communication) and makes FixMatch's strong view a SCARF
corruption; tabular sites only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vflflare.algorithms.blocks.contrastive_pretraining import (
    ContrastivePretrainSite,
    PretrainSettings,
    local_pretraining,
)
from vflflare.algorithms.blocks.fixmatch_ssl import FixMatchSettings, FixMatchSite
from vflflare.algorithms.blocks.kmeans import kmeans_on_gradients
from vflflare.algorithms.blocks.representations import FINAL_PARTS, reps_of, train_classifier, upload_representations
from vflflare.algorithms.plugin import Algorithm
from vflflare.config import JobConfig
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.label_party import LabelParty
from vflflare.protocol.payload import Payload
from vflflare.protocol.run_context import RunContext
from vflflare.protocol.transport import Transport
from vflflare.registry import register

TABULAR_SSL = ("paper", "scarf")


@dataclass
class OneShotConfig(PretrainSettings, FixMatchSettings, JobConfig):
    privacy_channels = frozenset({"representations", "gradients"})  # the partial gradients
    gradient_passes = 1
    # local SSL on tabular sites. paper: FixMatch-tab as published (mask to the local mean, then Gaussian
    # noise), from an untrained f_k. scarf: f_k first warm-started by SS-VFL's LocalCL (the pretrain_*
    # settings, cl_temperature, scarf_rate; no communication), and FixMatch's strong view corrupts cells
    # at scarf_rate with draws from the column's marginal, as sigma = 0.1 noise barely moves a row and an
    # untrained f_k makes the partial gradients, hence the k-means labels, carry little
    # (benchmarks/ONESHOT_TABLES.md). Image sites keep the paper's behaviour under either
    tabular_ssl: str = "paper"

    def validate(self) -> None:
        super().validate()
        self.check(self.tabular_ssl in TABULAR_SSL, "tabular_ssl", f"must be one of {list(TABULAR_SSL)}")


class OneShotSite(ContrastivePretrainSite, FixMatchSite, FeatureParty):
    """State added: "temporary_labels" (k-means clusters of the aligned rows, never sent)."""

    steps = ("oneshot_update",)

    def contrastive_pretrain(self, payload: Payload) -> Payload:
        """Step (tabular_ssl = "scarf"): the warm start. An image site skips it: the change was named and
        measured for tables only, so images keep the paper's untrained f_k."""
        if self.view.modality != "table":
            return {"pretrain": {}}
        return super().contrastive_pretrain(payload)

    def strong_view_scarf_rate(self) -> float | None:
        return self.cfg.scarf_rate if self.cfg.tabular_ssl == "scarf" else None

    def oneshot_update(self, payload: Payload) -> Payload:
        """Step: client_update, then the representations of payload["represent"]."""
        self.client_update(payload["grads"], int(payload["num_classes"]))
        return self.representations(list(payload["represent"]))

    def client_update(self, grads: np.ndarray, num_classes: int) -> dict[str, Any]:
        """Alg. 1 ClientUpdate: k-means on the partial gradients -> temporary labels of the aligned rows,
        then local FixMatch-tab SSL on aligned (labeled) + unaligned rows. Returns small stats for the log."""
        grads = np.asarray(grads, dtype=np.float32)
        expected = (len(self.rows_of("aligned")), self.cfg.rep_dim)
        if grads.shape != expected:
            raise ValueError(f"{self.site}: partial gradients have shape {grads.shape}, expected {expected}")
        self.state["temporary_labels"] = torch.as_tensor(kmeans_on_gradients(grads, num_classes, self.seed))
        self.start_local_ssl(num_classes)
        return self.local_ssl(
            "oneshot", self.rows_of("aligned"), self.state["temporary_labels"], self.rows_of("unaligned")
        )


class OneShotLabel(LabelParty):
    channels = {"partial_gradients": "exchange"}

    def partial_gradients(self, reps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Alg. 1 lines 1, 5-7: fresh theta_c, CE loss on the aligned labeled rows, dLoss/dH_o^k per site."""
        joint = self.concat(reps, "aligned")
        head = self.new_head(joint.shape[1], "partial_gradients", sends_gradients=True)
        per_site = [torch.as_tensor(np.asarray(reps[s], dtype=np.float32)).requires_grad_(True) for s in self.sites]
        loss = F.cross_entropy(head(torch.cat(per_site, dim=1)), self.part_labels("aligned"))
        grads = self.to_sites(
            dict(zip(self.sites, torch.autograd.grad(loss, per_site))), self.part_labels("aligned"), "fresh"
        )
        return {site: g.numpy().astype(np.float32) for site, g in grads.items()}


def client_update(ctx: RunContext, reps: dict[str, np.ndarray], *, then_represent: list[str]) -> dict[str, dict]:
    """Alg. 1 lines 5-13, (2)-(5) in Fig. 2: partial gradients down with C, local k-means + SSL, new
    representations up."""
    net, label = ctx.net, ctx.label
    with net.ledger.phase("partial_gradients"):
        grads = label.partial_gradients(reps)
    with net.ledger.phase("local_ssl"):
        return net.exchange(
            "oneshot_update",
            {s: {"grads": grads[s], "num_classes": label.num_classes, "represent": then_represent} for s in net.sites},
        )


@register
class OneShotVFL(Algorithm):
    name = "oneshot"
    job_name = "oneshot_vfl"
    Config, Site, Label = OneShotConfig, OneShotSite, OneShotLabel
    phases = ("representations", "partial_gradients", "local_ssl", "classifier")

    def run(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        ctx = self.context(net, label)
        if self.cfg.tabular_ssl == "scarf":
            local_pretraining(ctx)  # warm start of f_k (issue 40), local: no upload, no download
        reps = reps_of(upload_representations(ctx, ["aligned"]), "aligned")  # (1) H_o^k up
        reps = client_update(ctx, reps, then_represent=FINAL_PARTS)  # (2)-(5)
        return train_classifier(ctx, reps)  # (6)

    def expected_communications(self, sites: list[str], rows: dict[str, int]) -> dict[str, dict[str, int]]:
        # a label site also gets all representations twice (gradients, classifier) and sends gradients
        return self.per_site(sites, feature=(2, 1), label_extra=(1, 2))
