"""Vanilla VFL (split NN on the aligned labeled rows) and FedBCD (Liu et al., "FedBCD: A Communication-
Efficient Collaborative Learning Framework for Distributed Features": Q local steps on stale
gradients, local_steps = Q, paper default Q = 5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vflflare.algorithms.blocks.split_nn import (
    SplitNNLabel,
    SplitNNSettings,
    SplitNNSite,
    split_nn_communications,
    train_split_nn,
)
from vflflare.algorithms.plugin import Algorithm
from vflflare.config import JobConfig
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.label_party import LabelParty
from vflflare.protocol.transport import Transport
from vflflare.registry import register


@dataclass
class VanillaConfig(SplitNNSettings, JobConfig):
    pass


@dataclass
class FedBCDConfig(VanillaConfig):
    local_steps: int = 5  # Q (the one-shot paper's baseline setting)


class SplitNNParty(SplitNNSite, FeatureParty):
    pass


class SplitNNLabelParty(SplitNNLabel, LabelParty):
    pass


@register
class VanillaVFL(Algorithm):
    name = "vanilla"
    job_name = "vanilla_vfl"
    Config, Site, Label = VanillaConfig, SplitNNParty, SplitNNLabelParty
    phases = ("split_training", "evaluation")

    def run(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        return train_split_nn(self.context(net, label), rows["aligned_train"], epochs=self.cfg.split_epochs)

    def expected_communications(self, sites: list[str], rows: dict[str, int]) -> dict[str, dict[str, int]]:
        feature, label_extra = split_nn_communications(
            self.cfg, rows["aligned_train"], self.info["split_epochs"], False
        )
        return self.per_site(sites, feature, label_extra)


@register
class FedBCD(VanillaVFL):
    name = "fedbcd"
    job_name = None
    Config = FedBCDConfig
