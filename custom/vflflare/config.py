"""Hyper-parameters of a VFL job, shared by the controller, the sites and the in-process driver.

Defaults follow the one-shot VFL paper (Sun et al., CVPR-W 2023, Sec. 5.1) where it gives them:
B = 32, eta_s = eta_c = 0.01, FedBCD Q = 5, sigma = 0.1, r_m = 0.2. Everything else is our choice
and is marked as such.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from vflflare.data.schema import NUMERIC_TRANSFORMS

# Flows that never give the coordinator's label party a tensor, so HE works with label_owner 'server'.
HE_WITH_SERVER_LABELS = ("secure_sum",)


@dataclass
class VFLConfig:
    algorithm: str = "oneshot"  # vanilla | fedbcd | oneshot | fewshot | ssvfl_i | ssvfl_c
    seed: int = 0
    label_owner: str = "server"  # "server" or a site name
    # hash: salted ID digests intersected by the coordinator; psi: the intersection from NVFlare's DH-PSI
    # (jobs/psi or `vflflare jobs --psi`), canonical order derived locally (see algorithms/alignment.py)
    alignment: str = "hash"
    # local preprocessing of each site's numeric columns before standardisation (data/preprocess.py):
    # standard | signed_log | auto. A site's schema.json "numeric_transform" overrides it for that site.
    numeric_transform: str = "standard"
    # models (our choice; the paper says "a two-layer MLP" for the credit table)
    hidden_dim: int = 64
    rep_dim: int = 32
    classifier_hidden: int = 0  # 0 = linear classifier head on the concatenated representations
    # optimisation (paper: B 32, lr 0.01)
    batch_size: int = 32
    lr: float = 0.01
    val_fraction: float = 0.2  # share of aligned labeled rows held out for model selection
    # share of the remaining aligned labeled training rows the label party trains on: the first
    # ceil(labeled_fraction * n) in canonical order (validation rows unchanged); the rest count as
    # unlabeled rows at the sites (local SSL / contrastive pretraining still use their features).
    # For labeled-fraction benchmarks (SS-VFL paper Fig. 3: 1 %, 5 %, 10 %, 25 %)
    labeled_fraction: float = 1.0
    # server classifier (step 6 of Alg. 1)
    classifier_epochs: int = 100
    classifier_patience: int = 10
    # split-NN (vanilla VFL, FedBCD, finetune)
    split_epochs: int = 100
    split_patience: int = 20  # paper: stop baselines after 20 rounds without improvement
    local_steps: int = 1  # FedBCD Q (paper: 5); 1 = vanilla VFL
    finetune_epochs: int = 0  # > 0 adds split-NN finetuning after few-shot
    # local semi-supervised learning (FixMatch-tab)
    ssl_epochs: int = 10
    mask_rate: float = 0.2  # r_m
    noise_std: float = 0.1  # sigma
    lambda_u: float = 1.0
    fixmatch_threshold: float = 0.95  # FixMatch's tau
    unlabeled_ratio: int = 7  # FixMatch's mu
    class_balance: str = "none"  # none | distribution_alignment | balanced_threshold
    # few-shot (Alg. 2)
    # t in Eq. 9 (the paper gives no value). 0.9, not 0.6: on credit default (22 % positive) t = 0.6 is
    # below the majority rate, passes ~85 % of the unaligned rows with 82 %-accurate, mostly-negative
    # pseudo-labels and made few-shot worse than one-shot on validation; 0.9 raised few-shot's validation
    # AUC in 6 of 6 seed x N_o pairs (benchmarks/REPORT.md)
    fewshot_threshold: float = 0.9
    # global: one t for every class (the paper); prior_relative: t_c scaled to each class's base rate,
    # see representation_estimation.class_thresholds (our option, for imbalanced tables)
    fewshot_threshold_mode: str = "global"
    # SS-VFL (Castiglia, Wang, Patterson, "Self-Supervised Vertical Federated Learning"): local contrastive
    # pretraining (LocalCL, Alg. 4) of each f_k, SCARF-style corruption views, NT-Xent loss (Eq. 2).
    # The paper runs LocalCL for 200 epochs on images and gives no temperature, batch size or
    # projection head; T_un here is pretrain_epochs passes over the site's training rows (our choice:
    # 20 passes, ~3 700 steps on credit default, as good as 50 on credit default and Adult)
    pretrain_epochs: int = 20
    pretrain_batch_size: int = 128  # SCARF's batch size; in-batch negatives need more than B = 32
    pretrain_lr: float = 0.001  # Adam, SCARF's learning rate (our choice; the paper gives eta only symbolically)
    # tau of sim(z1, z2) = exp(z1.z2 / tau) in Eq. 1-2; the paper gives no value (our choice)
    cl_temperature: float = 0.5
    # share of a row's features SCARF replaces. SCARF's own default is 0.6 (ScarfCorruption keeps it);
    # 0.3 gave the better linear probe on credit default and Adult at every temperature tried, and 50
    # pretraining epochs no better than 20 (benchmarks/SSVFL_REPORT.md, tuning on a held-out split seed)
    scarf_rate: float = 0.3
    projection_dim: int = 32  # output width of the projection head g(.) used only during pretraining
    # after every split-NN epoch also score the test rows, for learning curves (TensorBoard split/test_*)
    # and communication-to-target tables; their representations are counted in ledger phase
    # "test_curve", never as training traffic. Off by default: it costs one extra upload per epoch.
    test_curve: bool = False
    # transport
    fp16: bool = False
    num_threads: int = 1
    # CKKS homomorphic encryption (vflflare.privacy.ckks) of every float tensor a site sends, with the
    # keys NVFlare provisions; the coordinator relays or adds ciphertexts only. Needs a label-owning
    # site (the coordinator cannot train on ciphertexts), except for secure aggregation.
    he: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.labeled_fraction <= 1.0:
            raise ValueError(f"labeled_fraction must be in (0, 1], got {self.labeled_fraction}")
        if not 0.0 <= self.scarf_rate <= 1.0:
            raise ValueError(f"scarf_rate must be in [0, 1], got {self.scarf_rate}")
        if self.cl_temperature <= 0:
            raise ValueError(f"cl_temperature must be > 0, got {self.cl_temperature}")
        if self.numeric_transform not in NUMERIC_TRANSFORMS:
            raise ValueError(
                f"numeric_transform must be one of {list(NUMERIC_TRANSFORMS)}, got {self.numeric_transform!r}"
            )
        if self.he and self.label_owner == "server" and self.algorithm not in HE_WITH_SERVER_LABELS:
            raise ValueError(
                f"he: true needs the labels on a site (label_owner: site-1, ...): with label_owner 'server' the "
                f"coordinator's label party would need plaintext representations ('{self.algorithm}'; only "
                f"{sorted(HE_WITH_SERVER_LABELS)} run with HE and labels on the server)"
            )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "VFLConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown VFL config keys: {unknown}; known keys: {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
