"""Tabular augmentations as composable callables TabularBatch -> TabularBatch.

FixMatch-tab (one-shot VFL paper, Eq. 5-6): the weak view masks each entry with probability r_m and
puts the local column mean in its place; the strong view adds N(0, sigma^2) noise to the weak view.
The paper writes alpha(x) = m*x + (1-m)*mean with m ~ B(1, r_m) while calling r_m "the expected ratio
of elements that are masked"; we follow the text: an entry is replaced with probability r_m.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from vflflare.data.types import FeatureBlock


class TabularBatch(NamedTuple):
    numeric: torch.Tensor  # float32 [n, d_num]
    categorical: torch.Tensor  # int64 [n, d_cat]

    @classmethod
    def from_block(cls, block: FeatureBlock) -> TabularBatch:
        numeric = torch.as_tensor(block.numeric, dtype=torch.float32)
        return cls(numeric, torch.as_tensor(block.categorical, dtype=torch.int64))

    def take(self, rows: torch.Tensor) -> TabularBatch:
        return TabularBatch(self.numeric[rows], self.categorical[rows])

    @property
    def num_rows(self) -> int:
        return int(self.numeric.shape[0])

    @classmethod
    def cat(cls, batches: list[TabularBatch]) -> TabularBatch:
        """Rows of several batches as one, for a single forward pass."""
        return cls(torch.cat([b.numeric for b in batches]), torch.cat([b.categorical for b in batches]))


Transform = Callable[[TabularBatch], TabularBatch]

# columns per slice when statistics are taken over a subset of a site's rows, so that the subset is never
# copied whole. torch sums a row-major [n, d] tensor over dim 0 in column groups of a few vectors and a narrow
# tail; slices on 64-column boundaries keep that grouping, and a tail under NARROWEST_SLICE columns stays with the
# slice before it (alone it would take another path). tests/test_fixmatch_tab.py checks the bits against a copy.
STATS_COLUMNS = 64
NARROWEST_SLICE = 8


class MaskToLocalMean:
    """Weak augmentation alpha(x) of Eq. 6: each entry is masked with probability `rate`; a masked numeric
    entry becomes its column's local mean, a masked categorical one its column's most frequent index
    (a mean of category indices is no category)."""

    def __init__(
        self, numeric_mean: torch.Tensor, categorical_mode: torch.Tensor, rate: float, generator: torch.Generator
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"mask rate must be in [0, 1], got {rate}")
        self.numeric_mean = numeric_mean
        self.categorical_mode = categorical_mode
        self.rate = rate
        self.generator = generator

    @classmethod
    def from_block(
        cls, block: FeatureBlock, rate: float, generator: torch.Generator, rows: np.ndarray | None = None
    ) -> MaskToLocalMean:
        """Statistics over the rows `rows` of `block` (all when None): the paper's x-bar over the site's N
        local samples, read a few columns at a time so that a site's table is never copied whole."""
        if rows is None:
            rows = np.arange(len(block))
        width = block.numeric.shape[1]
        starts = list(range(0, width, STATS_COLUMNS))
        if len(starts) > 1 and width - starts[-1] < NARROWEST_SLICE:
            starts.pop()
        mean = torch.zeros(width)
        for start, end in zip(starts, [*starts[1:], width]):
            mean[start:end] = torch.as_tensor(block.numeric[rows, start:end], dtype=torch.float32).mean(dim=0)
        categorical = np.asarray(block.categorical)
        mode = torch.as_tensor(
            np.array([np.bincount(categorical[rows, j]).argmax() for j in range(categorical.shape[1])], dtype=np.int64)
        )
        return cls(mean, mode, rate, generator)

    def _mask(self, like: torch.Tensor) -> torch.Tensor:
        return torch.rand(like.shape, generator=self.generator) < self.rate

    def __call__(self, batch: TabularBatch) -> TabularBatch:
        numeric = torch.where(self._mask(batch.numeric), self.numeric_mean, batch.numeric)
        categorical = torch.where(self._mask(batch.categorical), self.categorical_mode, batch.categorical)
        return TabularBatch(numeric, categorical)


class AddGaussianNoise:
    """n ~ N(0, std^2) added to every numeric entry (Eq. 5); categorical indices are left alone."""

    def __init__(self, std: float, generator: torch.Generator) -> None:
        self.std = std
        self.generator = generator

    def __call__(self, batch: TabularBatch) -> TabularBatch:
        noise = torch.randn(batch.numeric.shape, generator=self.generator) * self.std
        return TabularBatch(batch.numeric + noise, batch.categorical)


class WeakStrongViews:
    """(alpha(x), A(x)) with A(x) = alpha(x) + n: both views share one mask, as Eq. 6 prescribes."""

    def __init__(self, weak: Transform, strong_on_weak: Transform) -> None:
        self.weak = weak
        self.strong_on_weak = strong_on_weak

    def __call__(self, batch: TabularBatch) -> tuple[TabularBatch, TabularBatch]:
        weak = self.weak(batch)
        return weak, self.strong_on_weak(weak)


def fixmatch_tab_views(
    block: FeatureBlock,
    mask_rate: float,
    noise_std: float,
    generator: torch.Generator,
    scarf_rate: float | None = None,
    rows: torch.Tensor | None = None,
) -> WeakStrongViews:
    """FixMatch-tab's augmentation pair with statistics taken from the site's local rows: `rows` of `block`
    (all when None). With `scarf_rate`, the strong view corrupts the weak one by SCARF (marginals of those
    rows) instead of adding noise: sigma = 0.1 on standardised columns barely moves a row (one-shot's
    tabular_ssl = "scarf", benchmarks/ONESHOT_TABLES.md). The weak view is the same either way."""
    weak = MaskToLocalMean.from_block(block, mask_rate, generator, None if rows is None else rows.numpy())
    if scarf_rate is None:
        return WeakStrongViews(weak, AddGaussianNoise(noise_std, generator))
    return WeakStrongViews(weak, ScarfCorruption.from_block(block, scarf_rate, generator, rows))


# --- Views for contrastive / non-contrastive SSL (SS-VFL's LocalCL, FedHSSL) --------------------------------


def _check_rate(rate: float) -> None:
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"corruption rate must be in [0, 1], got {rate}")


def _check_reference(reference: TabularBatch) -> None:
    if len(reference.numeric) < 1 or len(reference.numeric) != len(reference.categorical):
        raise ValueError("the reference batch needs at least one row, with as many numeric as categorical rows")


class ScarfCorruption:
    """SCARF (Bahri et al., ICLR 2022): each entry is corrupted with probability `rate` and replaced by a draw
    from its column's empirical marginal, i.e. the same column of a uniformly random row of `reference`
    (one row drawn per entry), numeric and categorical alike. `reference` is the site's local rows, or with
    `rows` those rows of it (drawn in place: a site's table is not copied)."""

    def __init__(
        self,
        reference: TabularBatch,
        rate: float = 0.6,
        generator: torch.Generator | None = None,
        rows: torch.Tensor | None = None,
    ) -> None:
        _check_rate(rate)
        _check_reference(reference)
        if rows is not None and len(rows) < 1:
            raise ValueError("SCARF needs at least one reference row")
        self.reference = reference
        self.rate = rate
        self.generator = generator
        self.rows = rows

    @classmethod
    def from_block(
        cls,
        block: FeatureBlock,
        rate: float = 0.6,
        generator: torch.Generator | None = None,
        rows: torch.Tensor | None = None,
    ) -> ScarfCorruption:
        return cls(TabularBatch.from_block(block), rate, generator, rows)

    def _corrupt(self, values: torch.Tensor, marginal: torch.Tensor) -> torch.Tensor:
        mask = torch.rand(values.shape, generator=self.generator) < self.rate
        drawn = torch.randint(len(marginal if self.rows is None else self.rows), values.shape, generator=self.generator)
        if self.rows is not None:
            drawn = self.rows[drawn]
        return torch.where(mask, marginal.gather(0, drawn), values)

    def __call__(self, batch: TabularBatch) -> TabularBatch:
        return TabularBatch(
            self._corrupt(batch.numeric, self.reference.numeric),
            self._corrupt(batch.categorical, self.reference.categorical),
        )


class RandomFeatureReplacement:
    """FedHSSL's tabular augmentation (after Zou et al.): each entry is replaced with probability `rate`
    (FedHSSL: 30 %) by a random value: numeric entries by a uniform draw within the column's local
    [min, max], categorical ones by a uniform draw over the indices observed locally in that column.
    Statistics come from `reference`, the site's local rows."""

    def __init__(self, reference: TabularBatch, rate: float = 0.3, generator: torch.Generator | None = None) -> None:
        _check_rate(rate)
        _check_reference(reference)
        self.rate = rate
        self.generator = generator
        numeric = reference.numeric.float()
        self.low = numeric.min(dim=0).values if numeric.shape[1] else torch.zeros(0)
        self.high = numeric.max(dim=0).values if numeric.shape[1] else torch.zeros(0)
        observed = [torch.unique(col) for col in reference.categorical.T]
        self.counts = torch.tensor([len(u) for u in observed], dtype=torch.int64)
        width = max((len(u) for u in observed), default=0)
        self.observed = torch.zeros(len(observed), width, dtype=torch.int64)  # row j: column j's indices, padded
        for j, u in enumerate(observed):
            self.observed[j, : len(u)] = u

    @classmethod
    def from_block(
        cls, block: FeatureBlock, rate: float = 0.3, generator: torch.Generator | None = None
    ) -> RandomFeatureReplacement:
        return cls(TabularBatch.from_block(block), rate, generator)

    def _mask(self, like: torch.Tensor) -> torch.Tensor:
        return torch.rand(like.shape, generator=self.generator) < self.rate

    def __call__(self, batch: TabularBatch) -> TabularBatch:
        num_mask = self._mask(batch.numeric)
        uniform = torch.rand(batch.numeric.shape, generator=self.generator)
        numeric = torch.where(num_mask, self.low + (self.high - self.low) * uniform, batch.numeric)
        cat_mask = self._mask(batch.categorical)
        slot = (torch.rand(batch.categorical.shape, generator=self.generator) * self.counts).long()
        slot = torch.minimum(slot, self.counts - 1)  # guards the float edge u * c == c
        drawn = self.observed.T.gather(0, slot) if len(batch.categorical) else slot
        categorical = torch.where(cat_mask, drawn, batch.categorical)
        return TabularBatch(numeric, categorical)


class TwoViews:
    """The generic view interface: batch -> (transform_a(batch), transform_b(batch)); transform_b defaults
    to transform_a (two independent draws of one stochastic augmentation, as SimCLR/SCARF do). Works for
    any batch type, not only TabularBatch."""

    def __init__(self, transform_a: Callable, transform_b: Callable | None = None) -> None:
        self.transform_a = transform_a
        self.transform_b = transform_a if transform_b is None else transform_b

    def __call__(self, batch):  # noqa: ANN001, ANN204 - generic over batch types
        return self.transform_a(batch), self.transform_b(batch)
