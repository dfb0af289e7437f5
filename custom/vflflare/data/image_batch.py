"""A batch of a site's images (its own strips or its own image files): the image view's batch type."""

from __future__ import annotations

from typing import NamedTuple

import torch


class ImageBatch(NamedTuple):
    images: torch.Tensor  # float32 [n, channels, height, width], standardised per channel by the site

    def take(self, rows: torch.Tensor) -> ImageBatch:
        return ImageBatch(self.images[rows])

    @property
    def num_rows(self) -> int:
        return int(self.images.shape[0])

    @classmethod
    def cat(cls, batches: list[ImageBatch]) -> ImageBatch:
        return cls(torch.cat([b.images for b in batches]))
