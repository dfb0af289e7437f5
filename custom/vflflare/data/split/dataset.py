"""Splitting a named dataset of the data folder (data/sources.py, data/image_sources.py) into a folder of
per-party files: the library behind `vflflare split` and the benchmarks' splits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.data.image_sources import IMAGE_SOURCES, image_source_files, load_image_source
from vflflare.data.schema import TableSchema
from vflflare.data.sources import load_source, source_files
from vflflare.data.split.tables import SERVER, SplitResult, file_sha256, split_table, write_split


@dataclass
class DatasetSplit:
    result: SplitResult
    manifest: Path
    schemas: dict[str, TableSchema] | None  # image strips' schemas; None for tables


def synthetic_options(dataset: str, seed: int, rows: int | None, features: int | None, classes: int | None) -> dict:
    """The synthetic generator's own options; the synthetic table is drawn with the split's seed."""
    given = {"rows": rows, "features": features, "classes": classes}
    given = {key: value for key, value in given.items() if value is not None}
    if dataset != "synthetic":
        if given:
            raise ValueError(
                "--synthetic-rows/--synthetic-features/--synthetic-classes apply only to --dataset synthetic"
            )
        return {}
    return {**given, "seed": seed}


def source_checksums(files: list[Path], data_dir: str) -> dict[str, str]:
    return {path.relative_to(data_dir).as_posix(): file_sha256(path) for path in files}


def split_dataset(
    dataset: str,
    data_dir: str,
    sites: list[str],
    overlap: int,
    seed: int,
    out: str,
    *,
    test_fraction: float = 0.2,
    label_owner: str = SERVER,
    label_in_table: bool = False,
    active_site_labels: bool = False,
    site_columns: list[list[str]] | None = None,
    train_rows: int | None = None,
    test_rows: int | None = None,
    synthetic: dict[str, Any] | None = None,
    table_format: str = "csv",
) -> DatasetSplit:
    """Split `dataset` into `out` (a new or empty folder): a table by columns, an image set into strips.
    `synthetic`: synthetic_options(...); table_format: "csv" or "parquet" (write_split). Bad arguments or
    data raise ValueError."""
    images = dataset in IMAGE_SOURCES
    if images:
        from vflflare.data.split.images import split_images, write_strips

        if site_columns is not None:
            raise ValueError("--site-columns applies only to tables; images are cut into strips by the number of sites")
        if synthetic:
            raise ValueError(
                "--synthetic-rows/--synthetic-features/--synthetic-classes apply only to --dataset synthetic"
            )
        if table_format != "csv":
            raise ValueError("--format parquet applies only to tables; an image index stays a CSV file")
        source = load_image_source(dataset, data_dir)
        result, strips, schemas = split_images(source, dataset, sites, overlap, seed, train_rows, test_rows)
        files = image_source_files(dataset, data_dir)
    else:
        if train_rows is not None or test_rows is not None:
            raise ValueError("--train-rows/--test-rows apply only to image datasets; tables use --test-fraction")
        frame, labels, ids, categorical, default_columns = load_source(dataset, data_dir, **(synthetic or {}))
        if site_columns is None and len(sites) == 2:
            site_columns = default_columns
        result = split_table(frame, labels, ids, sites, overlap, seed, test_fraction, site_columns, categorical)
        schemas = None
        files = source_files(dataset, data_dir)
    manifest = write_split(
        result,
        out,
        label_owner,
        {"dataset": dataset, "source_sha256": source_checksums(files, data_dir)},
        label_in_table=label_in_table,
        schemas=schemas,
        active_site_labels=active_site_labels,
        table_format=table_format,
    )
    if images:
        write_strips(Path(out), result, strips)
    return DatasetSplit(result, manifest, schemas)


def split_silo_dataset(
    dataset: str,
    data_dir: str,
    sites: list[str],
    seed: int,
    out: str,
    *,
    setting: str = "standard",
    test_fraction: float = 0.2,
    train_rows: int | None = None,
    test_rows: int | None = None,
    synthetic: dict[str, Any] | None = None,
):
    """CFL's silo space of `dataset` into `out`: returns (SiloSpace, the manifest's path)."""
    from vflflare.data.split.silo import image_table, split_silo_space, write_silo_space

    if dataset in IMAGE_SOURCES:
        source = load_image_source(dataset, data_dir)
        rng = np.random.default_rng([seed, 1])
        train = rng.permutation(len(source.train_images))[:train_rows]
        test = rng.permutation(len(source.test_images))[:test_rows]
        frame = image_table(np.concatenate([source.train_images[train], source.test_images[test]]))
        labels = np.concatenate([source.train_labels[train], source.test_labels[test]])
        ids, categorical = [f"{dataset}-{i:05d}" for i in range(len(frame))], []
        files = image_source_files(dataset, data_dir)
    else:
        frame, labels, ids, categorical, _ = load_source(dataset, data_dir, **(synthetic or {}))
        files = source_files(dataset, data_dir)
    space = split_silo_space(frame, labels, ids, sites, seed, setting, test_fraction, categorical)
    extra = {"dataset": dataset, "seed": seed, "source_sha256": source_checksums(files, data_dir)}
    return space, write_silo_space(space, out, extra)
