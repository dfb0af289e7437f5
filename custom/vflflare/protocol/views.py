"""A site's data as the algorithms see it: a *view*. Algorithms never touch columns or pixels; they ask
the view for

- its row IDs (train and test tables) and batches of rows by position (`batch`): a batch is a tuple of
  the bottom model's inputs, so `encoder(*batch)` works whatever the modality;
- the augmentations of its modality (FixMatch's weak/strong pair, contrastive views);
- its bottom model f_k, built by the model factory from the job's `model` setting.

`TabularView` serves a site holding a table, `ImageView` a site holding images (its strips of a split
image dataset, or its own image files); sites of one job may hold either. The job's `model` builds a
table site's encoder and its `image_model` an image site's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from torch import nn

from vflflare.config import JobConfig
from vflflare.data.image_batch import ImageBatch
from vflflare.data.images import SiteImages
from vflflare.data.loading import DataRequest, load_site_data
from vflflare.data.types import SiteTables
from vflflare.models.factory import build_encoder
from vflflare.ssl.augment import ScarfCorruption, TabularBatch, TwoViews, WeakStrongViews, fixmatch_tab_views
from vflflare.ssl.image_augment import contrastive_image_views, fixmatch_image_views

TABLES = ("train", "test")


class SiteView(Protocol):
    site: str
    modality: str
    train_ids: Sequence[str]
    test_ids: Sequence[str]
    data_checks: dict[str, Any]  # data/checks.py's report of the test rows; empty for images

    def num_rows(self, table: str) -> int: ...

    def batch(self, table: str, rows: torch.Tensor) -> Any: ...

    def concat(self, batches: list[Any]) -> Any: ...

    def fixmatch_views(
        self,
        rows: torch.Tensor,
        mask_rate: float,
        noise_std: float,
        generator: torch.Generator,
        scarf_rate: float | None = None,
    ) -> WeakStrongViews: ...

    def contrastive_views(self, rows: torch.Tensor, rate: float, generator: torch.Generator) -> TwoViews: ...

    def encoder(self, model: dict[str, Any], rep_dim: int) -> nn.Module: ...


class _RowsView:
    """Rows by position from the site's train and test batches (`_batches`), whatever their type."""

    _batches: dict[str, Any]

    def num_rows(self, table: str) -> int:
        return self._batches[table].num_rows

    def batch(self, table: str, rows: torch.Tensor) -> Any:
        return self._batches[table].take(rows)

    def concat(self, batches: list[Any]) -> Any:
        return type(batches[0]).cat(batches)


class TabularView(_RowsView):
    """A site's preprocessed tables (data/loading.py): numeric and categorical columns."""

    modality = "table"

    def __init__(self, tables: SiteTables) -> None:
        self.tables = tables
        self.site = tables.site
        self.train_ids, self.test_ids = tables.train_ids, tables.test_ids
        self._batches = {"train": TabularBatch.from_block(tables.train), "test": TabularBatch.from_block(tables.test)}
        self.data_checks = tables.data_checks

    def fixmatch_views(
        self,
        rows: torch.Tensor,
        mask_rate: float,
        noise_std: float,
        generator: torch.Generator,
        scarf_rate: float | None = None,
    ) -> WeakStrongViews:
        """FixMatch-tab's weak/strong pair, with local statistics (and, with `scarf_rate`, the SCARF
        marginals of the strong view) taken over the train rows `rows`."""
        return fixmatch_tab_views(self.tables.train, mask_rate, noise_std, generator, scarf_rate, rows)

    def contrastive_views(self, rows: torch.Tensor, rate: float, generator: torch.Generator) -> TwoViews:
        """Two SCARF corruptions, replacement values drawn from the train rows `rows`."""
        return TwoViews(ScarfCorruption(self._batches["train"], rate=rate, generator=generator, rows=rows))

    def encoder(self, model: dict[str, Any], rep_dim: int) -> nn.Module:
        inputs = {"numeric_dim": self.tables.train.numeric.shape[1], "cardinalities": self.tables.train.cardinalities}
        return build_encoder(model, inputs, rep_dim)


class ImageView(_RowsView):
    """A site's standardised images (data/images.py); a batch is an `ImageBatch`. Augmentations act on
    the site's own images only, after the split."""

    modality = "image"

    def __init__(self, images: SiteImages) -> None:
        self.images = images
        self.site = images.site
        self.train_ids, self.test_ids = images.train_ids, images.test_ids
        self.data_checks: dict[str, Any] = {}  # pixels are standardised per channel; no column to check
        self._batches = {"train": ImageBatch(images.train), "test": ImageBatch(images.test)}
        self.channels, self.size = int(images.train.shape[1]), (int(images.train.shape[2]), int(images.train.shape[3]))

    def fixmatch_views(
        self,
        rows: torch.Tensor,
        mask_rate: float,
        noise_std: float,
        generator: torch.Generator,
        scarf_rate: float | None = None,
    ) -> WeakStrongViews:
        """FixMatch's image pair (flip and shift; RandAugment-style and Cutout on top). mask_rate,
        noise_std and scarf_rate belong to FixMatch-tab and do not apply to images: an image site keeps
        the paper's views whatever one-shot's tabular_ssl."""
        return fixmatch_image_views(self.channels, self.size, generator)

    def contrastive_views(self, rows: torch.Tensor, rate: float, generator: torch.Generator) -> TwoViews:
        """SimCLR-style views (crop, flip, colour jitter, blur); rate is SCARF's and does not apply."""
        return contrastive_image_views(self.channels, self.size, generator)

    def encoder(self, model: dict[str, Any], rep_dim: int) -> nn.Module:
        return build_encoder(model, {"in_channels": self.channels, "image_size": self.size}, rep_dim)


def describe_view(view: SiteView) -> str:
    """One line for the site's log: what it holds."""
    if isinstance(view, ImageView):
        return (
            f"{view.num_rows('train')} train and {view.num_rows('test')} test images, "
            f"{view.size[0]}x{view.size[1]} with {view.channels} channel(s)"
        )
    tables = view.tables
    text = f"{view.num_rows('train')} train and {view.num_rows('test')} test rows, {len(tables.feature_names)} features"
    if tables.numeric_transform != "standard":
        text += (
            f"; numeric_transform {tables.numeric_transform}, signed log on {len(tables.log_columns)} "
            f"column(s) {tables.log_columns}"
        )
    return text


def view_of(data: SiteTables | SiteImages) -> SiteView:
    """The view of a site's loaded data (data.loading.load_site_data) by its modality."""
    return ImageView(data) if isinstance(data, SiteImages) else TabularView(data)


def job_data_request(sites: Sequence[str], data_root: str | None, cfg: JobConfig) -> DataRequest:
    """What a job's parties load their data with: its sites and a party's data root, with the job's seed,
    numeric transform and ID normal forms. Here rather than in data/, which may not know JobConfig
    (ARCHITECTURE.md, Layers)."""
    return DataRequest(sites, data_root, cfg.seed, cfg.numeric_transform, cfg.id_normalize)


def load_site_view(site: str, request: DataRequest) -> SiteView:
    """A feature party's data as the algorithms see it (data.loading.load_site_data, viewed)."""
    return view_of(load_site_data(site, request))
