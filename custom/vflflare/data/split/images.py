"""Vertically partitioned images: every site holds its own strip of each image (one-shot VFL paper,
Sec. 5: CIFAR-10 cut into left and right halves for two parties).

K = 2 gives left/right halves; K = 4, 9, 16 ... a square grid (quadrants for 4), row-major. Rows are
split as tables are (`partition_rows`): the official test set is the test rows, and of the official
training set N_o aligned labeled rows are shared by all sites and the rest spread evenly over the sites.
Each site folder then holds what a real site would: its strips as PNG files and an index
(train.csv / test.csv: id,path) with a schema.json saying `modality: image`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from vflflare.data.image_sources import ImageSource
from vflflare.data.schema import DEFAULT_ID_COLUMN, DEFAULT_PATH_COLUMN, TableSchema
from vflflare.data.split.tables import SitePart, SplitResult, check_sites, label_frame, partition_rows

IMAGE_FOLDER = "images"


def strip_grid(n_sites: int) -> tuple[int, int]:
    """(rows, columns) of the strip grid for K sites."""
    if n_sites == 2:
        return 1, 2
    side = math.isqrt(n_sites)
    if n_sites >= 4 and side * side == n_sites:
        return side, side
    raise ValueError(f"images are cut into halves (2 sites) or a square grid (4, 9, 16 ... sites), not {n_sites}")


def strip_boxes(n_sites: int, height: int, width: int) -> list[tuple[int, int, int, int]]:
    """(top, bottom, left, right) pixel bounds of each site's strip, row-major."""
    rows, cols = strip_grid(n_sites)
    if height < rows or width < cols:
        raise ValueError(f"{height}x{width} images cannot be cut into a {rows}x{cols} grid")
    cuts_y = np.linspace(0, height, rows + 1).round().astype(int)
    cuts_x = np.linspace(0, width, cols + 1).round().astype(int)
    return [
        (int(cuts_y[r]), int(cuts_y[r + 1]), int(cuts_x[c]), int(cuts_x[c + 1]))
        for r in range(rows)
        for c in range(cols)
    ]


def cut_strips(images: np.ndarray, n_sites: int) -> list[np.ndarray]:
    """Each site's strips of images [n, height, width, channels]."""
    boxes = strip_boxes(n_sites, images.shape[1], images.shape[2])
    return [images[:, top:bottom, left:right] for top, bottom, left, right in boxes]


def split_images(
    source: ImageSource,
    dataset: str,
    sites: list[str],
    overlap: int,
    seed: int,
    train_rows: int | None = None,
    test_rows: int | None = None,
) -> tuple[SplitResult, dict[str, dict[str, np.ndarray]], dict[str, TableSchema]]:
    """The split (pure; same inputs and seed -> same split), each site's strips by table (rows in the
    index's order) and each site's schema. `train_rows` / `test_rows`: a seeded random subset of the
    official sets, for runs at reduced scale."""
    check_sites(sites)
    subset_rng = np.random.default_rng([seed, 1])
    pool = _subset(len(source.train_images), train_rows, subset_rng, "--train-rows")
    test_pool = _subset(len(source.test_images), test_rows, subset_rng, "--test-rows")
    if not 1 <= overlap <= len(pool):
        raise ValueError(f"overlap must be in 1..{len(pool)} (training images used), got {overlap}")
    aligned, unaligned = partition_rows(np.random.default_rng(seed).permutation(len(pool)), overlap, len(sites))
    train_ids = np.array([f"{dataset}-train-{i:05d}" for i in range(len(source.train_images))], dtype=object)
    test_ids = np.array([f"{dataset}-test-{i:05d}" for i in range(len(source.test_images))], dtype=object)
    test_images = cut_strips(source.test_images[test_pool], len(sites))
    parts, strips, schemas = {}, {}, {}
    for k, (site, own) in enumerate(zip(sites, unaligned)):
        rows = pool[np.sort(np.concatenate([aligned, own]))]
        train = cut_strips(source.train_images[rows], len(sites))[k]
        parts[site] = SitePart(
            [DEFAULT_PATH_COLUMN],
            [],
            _index(train_ids[rows], "train"),
            _index(test_ids[test_pool], "test"),
            n_unaligned=len(own),
        )
        strips[site] = {"train": train, "test": test_images[k]}
        schemas[site] = TableSchema(modality="image", image_size=(train.shape[1], train.shape[2]))
    result = SplitResult(
        sites=list(sites),
        parts=parts,
        overlap_ids=[str(i) for i in train_ids[pool[aligned]]],
        train_labels=label_frame(source.train_labels[pool], aligned, train_ids[pool]),
        test_labels=label_frame(source.test_labels, test_pool, test_ids),
        num_classes=source.num_classes,
        seed=seed,
        overlap=overlap,
        test_fraction=len(test_pool) / (len(test_pool) + len(pool)),
        local_labels={
            site: label_frame(source.train_labels[pool], np.sort(own), train_ids[pool])
            for site, own in zip(sites, unaligned)
        },
    )
    return result, strips, schemas


def write_strips(root: Path, result: SplitResult, strips: dict[str, dict[str, np.ndarray]]) -> None:
    """Each site's strips as PNG files where its index (train.csv / test.csv) points."""
    from PIL import Image

    for site, part in result.parts.items():
        for table, frame in (("train", part.train), ("test", part.test)):
            (root / site / IMAGE_FOLDER / table).mkdir(parents=True, exist_ok=True)
            for relative, pixels in zip(frame[DEFAULT_PATH_COLUMN], strips[site][table]):
                Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels).save(
                    root / site / relative, compress_level=1
                )


def _index(ids: np.ndarray, table: str) -> pd.DataFrame:
    return pd.DataFrame(
        {DEFAULT_ID_COLUMN: ids.astype(str), DEFAULT_PATH_COLUMN: [f"{IMAGE_FOLDER}/{table}/{i}.png" for i in ids]}
    )


def _subset(n: int, size: int | None, rng: np.random.Generator, option: str) -> np.ndarray:
    if size is None:
        return np.arange(n)
    if not 1 <= size <= n:
        raise ValueError(f"{option} must be in 1..{n}, got {size}")
    return np.sort(rng.choice(n, size, replace=False))
