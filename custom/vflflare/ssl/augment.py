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
    def from_block(cls, block: FeatureBlock) -> "TabularBatch":
        numeric = torch.as_tensor(block.numeric, dtype=torch.float32)
        return cls(numeric, torch.as_tensor(block.categorical, dtype=torch.int64))

    def take(self, rows: torch.Tensor) -> "TabularBatch":
        return TabularBatch(self.numeric[rows], self.categorical[rows])


Transform = Callable[[TabularBatch], TabularBatch]


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
    def from_block(cls, block: FeatureBlock, rate: float, generator: torch.Generator) -> "MaskToLocalMean":
        """Statistics over the rows of `block` (the paper's x-bar over the site's N local samples)."""
        mean = torch.as_tensor(block.numeric, dtype=torch.float32).mean(dim=0)
        mode = torch.as_tensor(
            np.array([np.bincount(col).argmax() for col in np.asarray(block.categorical).T], dtype=np.int64)
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
    block: FeatureBlock, mask_rate: float, noise_std: float, generator: torch.Generator
) -> WeakStrongViews:
    """FixMatch-tab's augmentation pair with statistics taken from the site's local rows `block`."""
    weak = MaskToLocalMean.from_block(block, mask_rate, generator)
    return WeakStrongViews(weak, AddGaussianNoise(noise_std, generator))
