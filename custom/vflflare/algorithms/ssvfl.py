"""Self-supervised VFL (Castiglia, Wang, Patterson, "Self-Supervised Vertical Federated Learning"):

- SS-VFL-I (Alg. 1): every party pretrains f_k by local contrastive learning (LocalCL, Alg. 4) on all
  its training rows, aligned or not, labeled or not, without communication; then sends the frozen
  representations of the labeled aligned rows once (with the validation and test rows, as one-shot
  VFL does), and the label party trains the prediction head on them. One upload per site, no download.
- SS-VFL-C (Alg. 2): the same pretraining, then split-NN training on the labeled aligned rows that
  keeps updating the pretrained f_k, with a fresh head at the label party and validation early stopping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vflflare.algorithms.blocks.contrastive_pretraining import (
    ContrastivePretrainSite,
    PretrainSettings,
    local_pretraining,
)
from vflflare.algorithms.blocks.representations import FINAL_PARTS, train_classifier, upload_representations
from vflflare.algorithms.blocks.split_nn import SplitNNSettings, SplitNNSite
from vflflare.algorithms.plugin import Algorithm
from vflflare.algorithms.vanilla import VanillaVFL
from vflflare.config import JobConfig
from vflflare.protocol.feature_party import FeatureParty
from vflflare.protocol.transport import Transport
from vflflare.registry import register


@dataclass
class SSVFLIConfig(PretrainSettings, JobConfig):
    pass


@dataclass
class SSVFLCConfig(SplitNNSettings, SSVFLIConfig):
    pass


class PretrainingSite(ContrastivePretrainSite, FeatureParty):
    pass


class PretrainingSplitSite(SplitNNSite, PretrainingSite):
    pass


@register
class SSVFLI(Algorithm):
    name = "ssvfl_i"
    job_name = "ssvfl_i"
    Config, Site = SSVFLIConfig, PretrainingSite
    phases = ("local_pretraining", "representations", "classifier")

    def run(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        ctx = self.context(net, label)
        local_pretraining(ctx)  # Alg. 1 lines 2-3
        reps = upload_representations(ctx, FINAL_PARTS)  # line 4: the one upload
        return train_classifier(ctx, reps)  # lines 6-10, with validation early stopping

    def expected_communications(self, sites: list[str], rows: dict[str, int]) -> dict[str, dict[str, int]]:
        return self.per_site(sites, feature=(1, 0), label_extra=(0, 1))


@register
class SSVFLC(VanillaVFL):
    name = "ssvfl_c"
    job_name = "ssvfl_c"
    Config, Site = SSVFLCConfig, PretrainingSplitSite
    phases = ("local_pretraining", *VanillaVFL.phases)

    def run(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        local_pretraining(self.context(net, label))  # Alg. 2 lines 2-4
        return super().run(net, label, rows)  # lines 5-17: split-NN from the pretrained f_k, fresh head
