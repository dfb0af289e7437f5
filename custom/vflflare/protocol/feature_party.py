"""Site-side party: owns its data view, its bottom model f_k and everything computed from raw features.

What every algorithm needs lives here: the aligned rows (canonical order) and the representation
upload. An algorithm's own site steps live in a subclass in its plug-in (or in a block mixin, such as
split-NN); the steps a site answers are the names in the `steps` tuples along the class's MRO.
Only representations (never features, never temporary labels) leave this object.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from vflflare.config import JobConfig
from vflflare.privacy.defenses import noisy_representations
from vflflare.privacy.iso import iso
from vflflare.privacy.private_randomness import PrivateRandomness
from vflflare.protocol.payload import Payload
from vflflare.protocol.state import PartyState
from vflflare.protocol.views import SiteView
from vflflare.seeding import derive_seed, seeded_init
from vflflare.torch_runtime import site_device
from vflflare.tracking import LogTracker, Tracker

# "aligned_unlabeled" (aligned rows without a label, canonical order) is a subset of "unaligned" (every
# training row that is neither labeled nor validation); it is filled only for plug-ins that ask for it
PARTS = ("aligned", "val", "test", "unaligned", "aligned_unlabeled")
_REPRESENT_CHUNK = 8192  # rows per no-grad forward, to bound memory on large tables


def forward_in_chunks(forward: Callable[[torch.Tensor], torch.Tensor], n: int, width: int) -> np.ndarray:
    """float32 [n, w]: forward(row indices) over rows 0..n-1, _REPRESENT_CHUNK rows per no-grad forward, written
    into one preallocated array, so that a large part is held once, not as chunks plus their concatenation. w is
    the output's width (`width` when there is no row). Training and scoring share it: the same rows give the same
    numbers in both."""
    reps: np.ndarray | None = None
    for start in range(0, n, _REPRESENT_CHUNK):
        end = min(start + _REPRESENT_CHUNK, n)
        chunk = forward(torch.arange(start, end)).cpu().numpy()
        if reps is None:  # the width is the output's, known from the first chunk
            reps = np.empty((n, chunk.shape[1]), dtype=np.float32)
        reps[start:end] = chunk
    return reps if reps is not None else np.zeros((0, width), dtype=np.float32)


def declared(cls: type, attribute: str) -> dict:
    """Merge a class attribute (tuple of names or dict) over the MRO, base classes first."""
    merged: dict = {}
    for klass in reversed(cls.__mro__):
        value = vars(klass).get(attribute)
        if value:
            merged.update(value if isinstance(value, dict) else dict.fromkeys(value))
    return merged


class FeatureParty:
    steps: tuple[str, ...] = ("represent",)
    colocated: Any = None  # the label party this site hosts, if it owns the labels (site_runtime._host_label)

    def __init__(
        self,
        site: str,
        view: SiteView,
        cfg: JobConfig,
        tracker: Tracker | None = None,
        *,
        position: int,
        private: PrivateRandomness | None = None,
    ) -> None:
        """Build f_k from cfg.model (cfg.image_model for a site holding images), seeded by the job seed and
        the site's `position` in the job's site list, never its name: the same data and seed give the same
        numbers whatever the sites are called (the k-th site seeds as "site-k" always did).
        private: the source of the noise that protects this site's columns (privacy/private_randomness.py);
        default: VFLFLARE_PRIVATE_SEED at this site, else the OS."""
        self.site = site
        self.view = view
        self.cfg = cfg
        self.tracker = tracker or LogTracker(f"vflflare.{site}")
        self.seed = derive_seed(cfg.seed, f"site-{position + 1}")
        self.private = private or PrivateRandomness.from_environment(f"site-{position + 1}")
        self.state = PartyState(f"site '{site}'")
        self.state["generator"] = torch.Generator().manual_seed(self.seed)
        self.device = site_device(cfg.device, f"site '{site}'")
        with seeded_init(self.seed):  # initialised on the CPU: the same weights whatever the device
            spec = cfg.image_model if view.modality == "image" else cfg.model
            self.state["encoder"] = view.encoder(spec, cfg.rep_dim).to(self.device)

    @classmethod
    def site_steps(cls) -> list[str]:
        return list(declared(cls, "steps"))

    @property
    def encoder(self) -> torch.nn.Module:
        return self.state["encoder"]

    @property
    def generator(self) -> torch.Generator:
        return self.state["generator"]

    # ------------------------------------------------------------------ rows
    def align(
        self,
        train_rows: np.ndarray,
        val_rows: np.ndarray,
        test_rows: np.ndarray,
        aligned_unlabeled: np.ndarray | None = None,
    ) -> None:
        """Row indices into the train table (aligned labeled rows, validation rows, aligned rows without a
        label) and the test table, each in the canonical order shared by all parties. Unaligned = the train
        rows neither labeled nor validation."""
        n_train, n_test = self.view.num_rows("train"), self.view.num_rows("test")
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
        parts["aligned_unlabeled"] = self._check_rows(
            "aligned_unlabeled", np.asarray([] if aligned_unlabeled is None else aligned_unlabeled), n_train, "train"
        )
        if not np.isin(parts["aligned_unlabeled"], parts["unaligned"]).all():
            raise ValueError(f"{self.site}: some aligned unlabeled rows are also labeled or validation rows")
        self.state["rows"] = {name: torch.as_tensor(rows, dtype=torch.int64) for name, rows in parts.items()}

    def _check_rows(self, part: str, rows: np.ndarray, n: int, table: str) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            bad = rows[(rows < 0) | (rows >= n)][0]
            raise ValueError(f"{self.site}: {part} row index {bad} is outside the {table} table ({n} rows)")
        if len(np.unique(rows)) != len(rows):
            raise ValueError(f"{self.site}: duplicate row indices in the {part} rows")
        return rows

    def rows_of(self, part: str) -> torch.Tensor:
        if part not in PARTS:
            raise ValueError(f"{self.site}: unknown part {part!r}; expected one of {PARTS}")
        if "rows" not in self.state:
            raise RuntimeError(f"{self.site}: call align() before using the {part} rows")
        return self.state["rows"][part]

    def part(self, part: str, positions: torch.Tensor | None = None) -> Any:
        """The batch of `part`'s rows, or of the rows at `positions` within the part."""
        rows = self.rows_of(part)
        return self.view.batch("test" if part == "test" else "train", rows if positions is None else rows[positions])

    def train_batch(self, rows: torch.Tensor) -> Any:
        return self.view.batch("train", rows)

    def encode(self, batch: Any) -> torch.Tensor:
        return self.encoder(*(tensor.to(self.device) for tensor in batch))

    def on_device(self, module: torch.nn.Module) -> torch.nn.Module:
        """A site-local module (a local head) next to f_k."""
        return module.to(self.device)

    # ------------------------------------------------------------------ representation upload
    def finite_loss(self, loss: torch.Tensor, phase: str, epoch: int, step: int) -> float:
        """loss.item(), or an error naming the site and the step where local training diverged: otherwise the
        site would go on to upload NaN representations and the job would end with a chance-level model."""
        value = loss.item()
        if not math.isfinite(value):
            raise FloatingPointError(
                f"site '{self.site}': {phase} diverged, loss {value} at epoch {epoch + 1}, step {step + 1}; "
                f"a lower learning rate or a check of the site's inputs for NaN/inf may help"
            )
        return value

    def with_iso(self, d: torch.Tensor, strength: float) -> torch.Tensor:
        """d with ISO noise (privacy/iso.py) from the site's own noise generator."""
        if "iso_generator" not in self.state:
            self.state["iso_generator"] = self.private.generator("iso")
        return iso(d, strength, self.state["iso_generator"])

    def to_upload(self, reps: torch.Tensor) -> torch.Tensor:
        """Representations as they leave the site: with representation_noise (DefenseSettings), noised."""
        if self.cfg.representation_noise == 0:
            return reps
        if "representation_noise_generator" not in self.state:
            self.state["representation_noise_generator"] = self.private.generator("representation-noise")
        return noisy_representations(reps, self.cfg.representation_noise, self.state["representation_noise_generator"])

    def own_representations(self, part: str) -> np.ndarray:
        """float32 [n_part, rep_dim] representations (eval mode, no grad) of a part, as the site itself sees them."""
        self.encoder.eval()
        with torch.no_grad():
            return forward_in_chunks(
                lambda rows: self.encode(self.part(part, rows)), len(self.rows_of(part)), self.cfg.rep_dim
            )

    def representations(self, parts: list[str]) -> dict[str, np.ndarray]:
        """The representations of each requested part as they are uploaded (DefenseSettings applied)."""
        return {part: self.to_upload(torch.as_tensor(self.own_representations(part))).numpy() for part in parts}

    def represent(self, payload: Payload) -> Payload:
        """Step: the representations of payload["parts"]."""
        return self.representations(list(payload["parts"]))
