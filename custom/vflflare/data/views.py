"""A site's data as the algorithms see it: a *view*. Algorithms never touch columns or pixels; they ask
the view for

- its row IDs (train and test tables) and batches of rows by position (`batch`): a batch is a tuple of
  the bottom model's inputs, so `encoder(*batch)` works whatever the modality;
- the augmentations of its modality (FixMatch's weak/strong pair, contrastive views);
- its bottom model f_k, built by the model factory from the job's `model` setting.

The tabular view is the only one so far; an image view implements the same methods.
"""
from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from vflflare.data.types import SiteTables
from vflflare.models.factory import build_encoder
from vflflare.ssl.augment import ScarfCorruption, TabularBatch, TwoViews, WeakStrongViews, fixmatch_tab_views

TABLES = ("train", "test")


class SiteView(Protocol):
    site: str
    train_ids: list[str]
    test_ids: list[str]

    def num_rows(self, table: str) -> int: ...

    def batch(self, table: str, rows: torch.Tensor) -> Any: ...

    def concat(self, batches: list[Any]) -> Any: ...

    def fixmatch_views(self, rows: torch.Tensor, mask_rate: float, noise_std: float,
                       generator: torch.Generator) -> WeakStrongViews: ...

    def contrastive_views(self, rows: torch.Tensor, rate: float, generator: torch.Generator) -> TwoViews: ...

    def encoder(self, model: dict[str, Any], rep_dim: int) -> nn.Module: ...


class TabularView:
    """A site's preprocessed tables (data/loading.py): numeric and categorical columns."""

    def __init__(self, tables: SiteTables) -> None:
        self.tables = tables
        self.site = tables.site
        self.train_ids, self.test_ids = tables.train_ids, tables.test_ids
        self._batches = {"train": TabularBatch.from_block(tables.train), "test": TabularBatch.from_block(tables.test)}

    def num_rows(self, table: str) -> int:
        return self._batches[table].num_rows

    def batch(self, table: str, rows: torch.Tensor) -> TabularBatch:
        return self._batches[table].take(rows)

    def concat(self, batches: list[TabularBatch]) -> TabularBatch:
        return TabularBatch.cat(batches)

    def fixmatch_views(
        self, rows: torch.Tensor, mask_rate: float, noise_std: float, generator: torch.Generator
    ) -> WeakStrongViews:
        """FixMatch-tab's weak/strong pair, with local statistics taken over the train rows `rows`."""
        return fixmatch_tab_views(self.tables.train.take(rows.numpy()), mask_rate, noise_std, generator)

    def contrastive_views(self, rows: torch.Tensor, rate: float, generator: torch.Generator) -> TwoViews:
        """Two SCARF corruptions, replacement values drawn from the train rows `rows`."""
        return TwoViews(ScarfCorruption(self.batch("train", rows), rate=rate, generator=generator))

    def encoder(self, model: dict[str, Any], rep_dim: int) -> nn.Module:
        inputs = {"numeric_dim": self.tables.train.numeric.shape[1], "cardinalities": self.tables.train.cardinalities}
        return build_encoder(model, inputs, rep_dim)
