"""Settings of a VFL job: the ones every algorithm shares (`JobConfig`) and, per algorithm plug-in,
its own section: a subclass of JobConfig that adds the settings of the blocks it uses (split-NN,
FixMatch, contrastive pretraining) and its own. A job's config is one flat dict; it is validated
against the chosen algorithm's class, so a key of another algorithm is an error naming both.

Shared defaults follow the one-shot VFL paper (Sun et al., CVPR-W 2023, Sec. 5.1) where it gives
them: B = 32, eta_s = eta_c = 0.01. Everything else is our choice and is marked as such.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

from vflflare.data.ids import ID_NORMALIZATIONS
from vflflare.data.schema import NUMERIC_TRANSFORMS
from vflflare.wire import WIRE_DTYPES

SERVER = "server"
ALIGNMENTS = ("hash", "psi")


def duplicates(names: Iterable[str]) -> list[str]:
    """The names given more than once, sorted."""
    return sorted(name for name, count in Counter(names).items() if count > 1)


class ConfigError(ValueError):
    """A bad job config: the message names the algorithm and the key."""


Bound = tuple[float | None, float | None]


@dataclass
class Settings:
    """Base of every config class and settings block: `validate` chains through the MRO.

    The numeric settings' ranges are declared once, here at the base, for every block: each class lists
    its own in `bounds` (setting -> (low, high), both inclusive, None = open; a subclass's entry replaces its
    base's), and `validate` checks them first, for every class of the config. Besides, every float setting
    (and every number of a list[float] setting) must be finite (no NaN, no inf), and an int setting no class
    bounds must still be >= 0: no count is negative."""

    bounds: ClassVar[dict[str, Bound]] = {}

    def validate(self) -> None:
        for key, kind in numeric_settings(type(self)).items():
            value = getattr(self, key)
            values = value if kind == "floats" else [value]
            if kind != "int" and not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
                self.check(False, key, "must be a finite number" if kind == "float" else "must hold finite numbers")
        for key, (low, high) in setting_bounds(type(self)).items():
            value = getattr(self, key)
            self.check(
                (low is None or value >= low) and (high is None or value <= high), key, describe_bound(low, high)
            )

    def check(self, ok: bool, key: str, message: str) -> None:
        if not ok:
            algorithm = getattr(self, "algorithm", "?")
            raise ConfigError(f"algorithm '{algorithm}': {key} {message}, got {getattr(self, key)!r}")


@cache
def numeric_settings(cls: type) -> dict[str, str]:
    """The numeric settings of a config class: name -> "int", "float" or "floats" (a list[float])."""
    hints = typing.get_type_hints(cls)
    kinds = {int: "int", float: "float", list[float]: "floats"}
    return {f.name: kinds[hints[f.name]] for f in dataclasses.fields(cls) if hints[f.name] in kinds}


@cache
def setting_bounds(cls: type) -> dict[str, Bound]:
    """Every setting's range: the `bounds` of `cls` and its bases (the most derived wins); an int setting
    none of them bounds gets (0, None)."""
    out: dict[str, Bound] = {key: (0, None) for key, kind in numeric_settings(cls).items() if kind == "int"}
    for klass in reversed(cls.__mro__):
        out.update(klass.__dict__.get("bounds", {}))
    return out


def describe_bound(low: float | None, high: float | None) -> str:
    if high is None:
        return f"must be >= {low}"
    if low is None:
        return f"must be <= {high}"
    return f"must be >= {low} and <= {high}"


DEVICES = r"cpu|auto|cuda(:\d+)?"  # JobConfig.device
# what the label party's side may send the sites, computed from the labels
LABEL_CHANNELS = frozenset({"gradients", "probabilities"})


@dataclass
class DefenseSettings(Settings):
    """Defenses against what the other parties could learn (privacy/defenses.py), each off by default and
    applied where the data leaves a party, so every algorithm that uses a channel gets them."""

    # label differential privacy: randomized response on the aligned training labels before any gradient,
    # probability or head is computed from them; epsilon > 0, 0 = off
    label_dp_epsilon: float = 0.0
    # the per-row gradients the label party sends a site without labels: each row clipped to this L2 norm
    # (0 = off), then Gaussian noise of std gradient_noise x gradient_clip, then only the largest
    # gradient_keep share of each row's entries kept (1 = all)
    gradient_clip: float = 0.0
    gradient_noise: float = 0.0  # the noise std as a multiple of gradient_clip (needs gradient_clip)
    # every row scaled to norm exactly gradient_clip, not only the longer ones (automatic clipping): C is then
    # a scale, not a statistic to pick from an undefended run (the sites' Adam ignores it), so gradient_clip: 1
    # works on any data; no row's norm tells its label
    gradient_normalize: bool = False
    # instead of gradient_noise: the label-DP epsilon the job's gradients may spend (at gradient_dp_delta), from
    # which the label party sets the noise for the job's planned passes (privacy/accounting.py); 0 = off
    gradient_dp_epsilon: float = 0.0
    gradient_dp_delta: float = 1e-5  # the delta of that target, and of every Gaussian epsilon a result records
    gradient_keep: float = 1.0  # the share of each gradient row's largest entries kept (1 = all)
    # Marvell (Li et al. 2022) on the same gradients, binary labels only: per batch, noise whose power is
    # this multiple of |mean gradient of class 1 - of class 0|^2, shaped to hide the label; 0 = off
    gradient_marvell: float = 0.0
    # Gaussian noise on every representation a site uploads, std = this x the root mean square of the
    # uploaded values; 0 = off
    representation_noise: float = 0.0

    # the channels an algorithm uses (set by its config class): "representations" up; "gradients" and
    # "probabilities" down, computed from the labels
    privacy_channels: ClassVar[frozenset[str]] = frozenset({"representations"})

    # 0 = off for each. The upper bounds keep every value where it still does something and nothing overflows:
    # an epsilon beyond 100 flips no label (randomized response keeps one with probability 1 - e^-100) and asks
    # for no noise, so it would change nothing while a result lists it as a defense; a norm of 1e6 clips no
    # gradient; noise 1000 x the clipping norm, Marvell's power 100 x |Delta|^2 (the paper's scale: 0.1-4) or a
    # representation noise 100 x its RMS buries the signal, and far larger values overflow (inf, then NaN)
    bounds = {
        "label_dp_epsilon": (0, 100),
        "gradient_dp_epsilon": (0, 100),
        "gradient_clip": (0, 1e6),
        "gradient_noise": (0, 1000),
        "gradient_marvell": (0, 100),
        "representation_noise": (0, 100),
    }

    def validate(self) -> None:
        super().validate()
        self.check(0 < self.gradient_keep <= 1, "gradient_keep", "must be in (0, 1] (1 = off)")
        self.check(
            self.gradient_noise == 0 or self.gradient_clip > 0,
            "gradient_noise",
            "needs gradient_clip > 0: the noise std is gradient_noise x gradient_clip",
        )
        self.check(0 < self.gradient_dp_delta < 1, "gradient_dp_delta", "must be in (0, 1)")
        self.check(
            not self.gradient_normalize or self.gradient_clip > 0,
            "gradient_normalize",
            "needs gradient_clip > 0: the norm every row is scaled to (1 works on any data)",
        )
        self.check(
            not self.gradient_dp_epsilon or self.gradient_clip > 0,
            "gradient_dp_epsilon",
            "needs gradient_clip > 0: the noise is set relative to the clipping norm",
        )
        self.check(
            not self.gradient_dp_epsilon or not self.gradient_noise,
            "gradient_dp_epsilon",
            "sets the noise itself: leave gradient_noise at 0",
        )
        channels = self.privacy_channels
        self.check(
            not self.label_dp_epsilon or channels & LABEL_CHANNELS,
            "label_dp_epsilon",
            "has nothing to protect: this algorithm sends the sites nothing computed from the labels",
        )
        for key in ("gradient_clip", "gradient_noise", "gradient_marvell", "gradient_dp_epsilon"):
            self.check(
                not getattr(self, key) or "gradients" in channels,
                key,
                "has nothing to protect: this algorithm sends the sites no gradients",
            )
        self.check(
            self.gradient_keep == 1 or "gradients" in channels,
            "gradient_keep",
            "has nothing to protect: this algorithm sends the sites no gradients",
        )
        self.check(
            not self.representation_noise or "representations" in channels,
            "representation_noise",
            "has nothing to protect: this algorithm's sites upload no representations",
        )

    @property
    def gradient_passes(self) -> int:
        """The most passes over the aligned rows whose gradients the sites receive (the plug-in's config says)."""
        return 0

    @property
    def defends_gradients(self) -> bool:
        """A defense is on for the per-row gradients the sites receive (ISO: the split-NN block's setting)."""
        return bool(
            self.gradient_clip or self.gradient_marvell or self.gradient_keep < 1 or getattr(self, "iso_gradients", 0.0)
        )

    @property
    def defended(self) -> bool:
        """Any defense is on, so private randomness is drawn (ISO: FedHSSL's and the split-NN block's settings)."""
        return bool(self.defenses()) or self.defends_gradients or bool(getattr(self, "iso_pretrain", 0.0))

    def defenses(self) -> dict[str, float | bool]:
        """The defenses switched on, by setting: what a result records (the epsilon spent among them)."""
        off = {
            "label_dp_epsilon": 0.0,
            "gradient_clip": 0.0,
            "gradient_normalize": False,
            "gradient_noise": 0.0,
            "gradient_dp_epsilon": 0.0,
            "gradient_keep": 1.0,
            "gradient_marvell": 0.0,
            "representation_noise": 0.0,
        }
        return {key: getattr(self, key) for key, value in off.items() if getattr(self, key) != value}


@dataclass
class JobConfig(DefenseSettings):
    algorithm: str = "oneshot"  # a registered plug-in (vflflare.registry.algorithms())
    seed: int = 0  # every random draw of the job derives from it (seeding.py); split seed = job seed in the benchmarks
    label_owner: str = SERVER  # "server" or a site name
    # hash: salted ID digests intersected by the coordinator; psi: the intersection from NVFlare's DH-PSI
    # (jobs/psi or a PSI phase in the same job), canonical order derived locally (protocol/alignment.py)
    alignment: str = "hash"
    # ID normalisation every party applies to its IDs before hashing or PSI (data/ids.py): any of
    # nfc, strip, casefold, strip_leading_zeros. Off by default: "007" and "7" are different rows.
    id_normalize: list[str] = field(default_factory=list)
    # fail at alignment, with the alignment report, when fewer training rows align: below 1 a fraction
    # of the smallest party's training rows, from 1 on a row count; 0 = only the per-class minimum
    min_aligned: float = 0.0
    # a test row or test label without partner at every other party fails the job (it would go
    # unscored); true scores only the shared rows and reports how many were left out
    allow_partial_test: bool = False
    # local preprocessing of each site's numeric columns before standardisation (data/preprocess.py):
    # standard | signed_log | auto. A site's schema.json "numeric_transform" overrides it for that site.
    numeric_transform: str = "standard"
    # each site's bottom model f_k, built by vflflare.models.build_encoder (our choice; the paper says
    # "a two-layer MLP" for the credit table)
    model: dict[str, Any] = field(default_factory=lambda: {"name": "mlp", "hidden": [64]})
    # the bottom model of a site holding images (models/image.py): cnn (small, MNIST and CI), wrn
    # (WideResNet, the one-shot paper's CIFAR-10 backbone) or resnet (MONAI's, for your own images)
    image_model: dict[str, Any] = field(default_factory=lambda: {"name": "cnn"})
    rep_dim: int = 32  # width of each site's representation h_k (the bottom model's output)
    classifier_hidden: int = 0  # 0 = linear classifier head on the concatenated representations
    # optimisation (paper: B 32, lr 0.01)
    batch_size: int = 32
    lr: float = 0.01  # learning rate of every optimizer without its own
    # L2 penalty of every optimizer (Adam's weight_decay), bottoms and heads alike; the papers use none
    weight_decay: float = 0.0
    val_fraction: float = 0.2  # share of aligned labeled rows held out for model selection
    # share of the remaining aligned labeled training rows the label party trains on: the first
    # ceil(labeled_fraction * n) in canonical order (validation rows unchanged); the rest count as
    # unlabeled rows at the sites. For labeled-fraction benchmarks (SS-VFL paper Fig. 3).
    labeled_fraction: float = 1.0
    # the label party's classifier on fixed representations (one-shot Alg. 1 step 6, SS-VFL-I)
    classifier_epochs: int = 100
    classifier_patience: int = 10  # its early stopping: epochs without a better validation score
    # a label party at a site also fits a model of its own columns alone and reports the gain over it
    # (protocol/going_alone.py); true: deliver the blend of both whose share is best on the validation rows
    blend_own_model: bool = False
    # resume (protocol/checkpoint.py): journal every phase exchange and checkpoint every party's state
    # under a run id (the NVFlare job id); resume: that run id, to go on from its last completed exchange
    checkpoint: bool = False
    resume: str = ""  # the run id to go on with ("" = a new run)
    # transport: the precision of every plaintext float tensor on the wire (protocol/payload.py):
    # float32 | float16 | bfloat16 | int8 (one scale per tensor). Parties compute in float32 throughout.
    wire_dtype: str = "float32"
    num_threads: int = 1  # torch threads per party
    # where each site trains its bottom model and local heads (torch_runtime.site_device): cpu, or auto (the
    # site's GPU if it has one), cuda, cuda:N. The label party's heads on representations stay on the CPU.
    device: str = "cpu"
    # a site the coordinator waits on that answers nothing, or works on a task without reporting
    # progress (an epoch), for this long (or 5 x its slowest epoch) ends the job (flare/liveness.py)
    stall_timeout: float = 300.0
    # the sites the job runs with, by name (VFLRecipe(sites=...), job.py --sites a,b, vflflare jobs --sites):
    # any other site taking part, or one of them missing, fails the job at setup naming it
    # (protocol/topology.py). Empty: any names, at least the recipe's min_clients of them.
    sites: list[str] = field(default_factory=list)
    # a site of the job that has not picked up its first task this long after the job started (its job
    # process never came up) fails the job naming it (flare/liveness.py)
    join_timeout: float = 120.0
    # CKKS homomorphic encryption (vflflare.privacy.ckks) of every float tensor a site sends, with the
    # keys NVFlare provisions; the coordinator relays or adds ciphertexts only. Needs a label-owning
    # site (the coordinator cannot train on ciphertexts) unless the plug-in never hands it a tensor.
    he: bool = False
    # modules imported before the algorithm is looked up, so plug-ins outside vflflare can register
    plugins: list[str] = field(default_factory=list)

    # set by the plug-in's config class: True when the coordinator never needs a plaintext tensor
    he_with_server_labels: ClassVar[bool] = False

    bounds = {
        "seed": (0, None),
        "rep_dim": (1, None),
        "classifier_hidden": (0, None),
        "batch_size": (1, None),
        "classifier_epochs": (1, None),
        "classifier_patience": (1, None),
        "num_threads": (1, None),
        "weight_decay": (0, None),
        "min_aligned": (0, None),
    }

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        super().validate()
        self.check(0.0 < self.labeled_fraction <= 1.0, "labeled_fraction", "must be in (0, 1]")
        self.check(0.0 <= self.val_fraction < 1.0, "val_fraction", "must be in [0, 1)")
        self.check(self.stall_timeout > 0, "stall_timeout", "must be > 0 seconds")
        self.check(self.join_timeout > 0, "join_timeout", "must be > 0 seconds")
        self.check(
            not duplicates(self.sites), "sites", f"must name each site once: duplicate names {duplicates(self.sites)}"
        )
        self.check(not self.sites or len(self.sites) >= 2, "sites", "must name at least 2 sites (or none)")
        self.check(
            not self.sites or self.label_owner in (SERVER, *self.sites),
            "label_owner",
            f"must be 'server' or one of the job's sites {self.sites}",
        )
        self.check(
            self.numeric_transform in NUMERIC_TRANSFORMS,
            "numeric_transform",
            f"must be one of {list(NUMERIC_TRANSFORMS)}",
        )
        self.check(
            set(self.id_normalize) <= set(ID_NORMALIZATIONS), "id_normalize", f"may hold only {list(ID_NORMALIZATIONS)}"
        )
        self.check(self.alignment in ALIGNMENTS, "alignment", f"must be one of {list(ALIGNMENTS)}")
        self.check(self.wire_dtype in WIRE_DTYPES, "wire_dtype", f"must be one of {list(WIRE_DTYPES)}")
        self.check(
            not (self.he and self.wire_dtype != "float32"),
            "wire_dtype",
            "must stay float32 with he: true (the tensors cross as CKKS ciphertexts)",
        )
        self.check(re.fullmatch(DEVICES, self.device) is not None, "device", "must be cpu, auto, cuda or cuda:N")
        self.check(self.lr > 0, "lr", "must be > 0")
        self.check(isinstance(self.model.get("name"), str), "model", 'needs a "name", e.g. {"name": "mlp"}')
        self.check(isinstance(self.image_model.get("name"), str), "image_model", 'needs a "name", e.g. {"name": "cnn"}')
        self.check(
            not (self.he and self.label_owner == SERVER and not self.he_with_server_labels),
            "he",
            "needs the labels on a site (label_owner: site-1, ...): with label_owner 'server' the "
            "coordinator's label party would need plaintext representations",
        )
        self.check(
            not (self.he and self.resume and self.label_owner != SERVER),
            "resume",
            "cannot go on with a run under he: true with the labels on a site: each site's HE key pair "
            "lives only in the memory of the job that made it (privacy/he_keys.py), so the earlier job's "
            "journaled ciphertexts cannot be decrypted any more; start a new run",
        )

    @property
    def representation_width(self) -> int:
        """Width of one site's representations as the label party receives them."""
        return self.rep_dim

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> JobConfig:
        """The config of `values`, checked: every key known to this class, every value of its type."""
        algorithm = values.get("algorithm", "?")
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if "fp16" in unknown:
            raise ConfigError(f"algorithm '{algorithm}': fp16 is now wire_dtype (fp16: true is wire_dtype: float16)")
        if unknown:
            raise ConfigError(f"algorithm '{algorithm}' has no setting {unknown}; its settings: {sorted(known)}")
        for key, value in values.items():
            expected = typing.get_origin(hints[key]) or hints[key]
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                continue
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise ConfigError(
                    f"algorithm '{algorithm}': {key} must be {expected.__name__}, got {type(value).__name__} {value!r}"
                )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
