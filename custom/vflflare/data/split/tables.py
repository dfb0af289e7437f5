"""Turning one whole table into per-party data the way the few-overlap VFL papers do.

One-shot VFL (Sun et al. 2023, Sec. 5): shuffle; hold out aligned test rows that every party has;
of the rest, N_o aligned rows shared by all parties (the only labeled ones, labels at the label
party), and the remaining rows split evenly and disjointly among the K parties, unlabeled.
Features are split by column lists or evenly in column order. The embedded default and the CLI
both use `split_table`, so "the same split" always means the same rows.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vflflare.data.schema import (
    DEFAULT_ID_COLUMN,
    DEFAULT_LABEL_COLUMN,
    LABELS_FILE,
    MANIFEST_FILE,
    OVERLAP_IDS_FILE,
    SCHEMA_FILE,
    TEST_FILE,
    TEST_LABELS_FILE,
    TRAIN_FILE,
    TRAIN_LABELS_FILE,
    LabelSpec,
    TableSchema,
)

SERVER = "server"


@dataclass
class SitePart:
    """One feature party's share. Tables have the ID column first, rows in source order."""

    columns: list[str]
    categorical: list[str]
    train: pd.DataFrame  # the aligned rows and this party's unaligned rows
    test: pd.DataFrame
    n_unaligned: int


@dataclass
class SplitResult:
    sites: list[str]
    parts: dict[str, SitePart]
    overlap_ids: list[str]
    train_labels: pd.DataFrame  # id, label of the aligned rows only
    test_labels: pd.DataFrame
    num_classes: int
    seed: int
    overlap: int
    test_fraction: float
    # id, label of each site's own unaligned rows: written only for `--active-site-labels` (VFLHLP's
    # active party holds labels for all of its local rows)
    local_labels: dict[str, pd.DataFrame] = field(default_factory=dict)


def split_table(
    frame: pd.DataFrame,
    labels: np.ndarray,
    ids: list[str],
    sites: list[str],
    overlap: int,
    seed: int,
    test_fraction: float = 0.2,
    site_columns: list[list[str]] | None = None,
    categorical: Sequence[str] = (),
) -> SplitResult:
    """Split rows and columns among `sites` (pure; same inputs and seed -> same split)."""
    labels = np.asarray(labels)
    _check_rows(frame, labels, ids)
    check_sites(sites)
    columns = _site_columns(frame, sites, site_columns)
    unknown_categorical = [name for name in categorical if name not in frame.columns]
    if unknown_categorical:
        raise ValueError(f"categorical columns {unknown_categorical} are not in the table")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    n_rows = len(frame)
    n_test = int(round(test_fraction * n_rows))
    if n_test < 1:
        raise ValueError(f"test_fraction {test_fraction} of {n_rows} rows leaves no test row")
    available = n_rows - n_test
    if not 1 <= overlap <= available:
        raise ValueError(f"overlap must be in 1..{available} (rows left after {n_test} test rows), got {overlap}")

    order = np.random.default_rng(seed).permutation(n_rows)
    test_rows = np.sort(order[:n_test])
    aligned_rows, unaligned = partition_rows(order[n_test:], overlap, len(sites))

    id_array = np.asarray(ids, dtype=object)
    parts: dict[str, SitePart] = {}
    for site, names, own_rows in zip(sites, columns, unaligned):
        train_rows = np.sort(np.concatenate([aligned_rows, own_rows]))
        parts[site] = SitePart(
            columns=names,
            categorical=[name for name in names if name in categorical],
            train=_with_ids(frame, names, train_rows, id_array),
            test=_with_ids(frame, names, test_rows, id_array),
            n_unaligned=len(own_rows),
        )
    return SplitResult(
        sites=list(sites),
        parts=parts,
        overlap_ids=[str(value) for value in id_array[aligned_rows]],
        train_labels=label_frame(labels, aligned_rows, id_array),
        test_labels=label_frame(labels, test_rows, id_array),
        num_classes=int(labels.max()) + 1,
        seed=seed,
        overlap=overlap,
        test_fraction=test_fraction,
        local_labels={site: label_frame(labels, np.sort(own), id_array) for site, own in zip(sites, unaligned)},
    )


def partition_rows(order: np.ndarray, overlap: int, n_sites: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The first `overlap` rows of a shuffled `order` are aligned (sorted); the rest are spread evenly
    and disjointly over the sites, unaligned. Tables and images both split their rows this way."""
    return np.sort(order[:overlap]), np.array_split(order[overlap:], n_sites)


def write_split(
    result: SplitResult,
    out_dir: str | os.PathLike[str],
    label_owner: str = SERVER,
    manifest_extra: Mapping[str, Any] | None = None,
    label_in_table: bool = False,
    schemas: Mapping[str, TableSchema] | None = None,
    active_site_labels: bool = False,
    table_format: str = "csv",
) -> Path:
    """Write the data-root layout (site folders, label files, overlap_ids.csv, manifest.json) into a new
    or empty `out_dir`, which is then usable as VFLFLARE_DATA_ROOT. Returns the manifest's path.

    With `label_in_table` the labels go into a 'label' column of the label owner's train.csv (empty on
    its unaligned rows, which are unlabeled) and test.csv, declared in its schema.json, instead of
    label files. With `active_site_labels` the label-owning site also gets the labels of its own unaligned
    rows (VFLHLP's active party). `schemas`: a site's schema.json when it is not a plain table's (images). A non-empty
    folder is refused rather than overwritten: leftover site folders from an
    earlier split with more sites would silently join the new one."""
    if label_owner != SERVER and label_owner not in result.sites:
        raise ValueError(f"label owner must be {SERVER!r} or one of the sites {result.sites}, got {label_owner!r}")
    if label_in_table:
        if label_owner == SERVER:
            raise ValueError(f"labels in a table need a site label owner; {SERVER!r} has no table (use --label-owner)")
        if DEFAULT_LABEL_COLUMN in result.parts[label_owner].columns:
            raise ValueError(
                f"site {label_owner!r} has a feature column named {DEFAULT_LABEL_COLUMN!r}, the label column's name"
            )
    train_labels = result.train_labels
    if active_site_labels:
        if label_owner == SERVER:
            raise ValueError(
                f"active-site labels need a site label owner; {SERVER!r} holds no rows of its own (use --label-owner)"
            )
        train_labels = pd.concat([train_labels, result.local_labels[label_owner]], ignore_index=True)
    manifest = {**_manifest(result, label_owner, label_in_table), "active_site_labels": active_site_labels}
    clashes = sorted(set(manifest_extra or {}) & set(manifest))
    if clashes:
        raise ValueError(f"manifest_extra may not replace the split's own keys {clashes}")
    root = Path(out_dir)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(f"output folder {root} exists and is not empty; remove it or choose another --out")

    for site, part in result.parts.items():
        folder = root / site
        folder.mkdir(parents=True, exist_ok=True)
        schema = (schemas or {}).get(site) or TableSchema(DEFAULT_ID_COLUMN, tuple(part.categorical))
        train, test = part.train, part.test
        if label_in_table and site == label_owner:
            schema = replace(schema, label_column=DEFAULT_LABEL_COLUMN, num_classes=result.num_classes)
            train, test = _withlabel_frame(train, train_labels), _withlabel_frame(test, result.test_labels)
        write_frame(folder / TRAIN_FILE, train, table_format)
        write_frame(folder / TEST_FILE, test, table_format)
        write_json(folder / SCHEMA_FILE, schema.to_dict())
    if not label_in_table:
        label_folder = root / label_owner
        label_folder.mkdir(parents=True, exist_ok=True)
        write_frame(label_folder / TRAIN_LABELS_FILE, train_labels, table_format)
        write_frame(label_folder / TEST_LABELS_FILE, result.test_labels, table_format)
        write_json(label_folder / LABELS_FILE, label_spec(result).to_dict())
    write_text(root / OVERLAP_IDS_FILE, frame_to_csv(pd.DataFrame({DEFAULT_ID_COLUMN: result.overlap_ids})))
    write_json(root / MANIFEST_FILE, {**manifest, **(manifest_extra or {})})
    return root / MANIFEST_FILE


def label_spec(result: SplitResult) -> LabelSpec:
    """The labels.json that goes with a split's label files."""
    return LabelSpec(result.num_classes, DEFAULT_ID_COLUMN, DEFAULT_LABEL_COLUMN)


def frame_to_csv(frame: pd.DataFrame) -> str:
    """CSV text of a split table; floats are written with repr precision, so reading back is exact."""
    return frame.to_csv(index=False, lineterminator="\n")


def write_frame(path: Path, frame: pd.DataFrame, table_format: str) -> None:
    """A split table at `path` (a .csv name), or beside it as Parquet: float columns as float64, every other
    column as the very text the CSV file would hold, so both formats load to the same numbers."""
    if table_format == "csv":
        write_text(path, frame_to_csv(frame))
        return
    if table_format != "parquet":
        raise ValueError(f"table format must be csv or parquet, got {table_format!r}")
    import pyarrow as pa
    import pyarrow.parquet as pq

    # a float column with gaps (a label column's unlabeled rows) is text too: its empty cells stay empty
    texts = [n for n in frame.columns if not pd.api.types.is_float_dtype(frame[n]) or frame[n].isna().any()]
    as_text = pd.read_csv(io.StringIO(frame_to_csv(frame[texts])), dtype=str, keep_default_na=False)
    columns = {
        name: pa.array(as_text[name].tolist(), pa.string())
        if name in texts
        else pa.array(frame[name].to_numpy(np.float64))
        for name in frame.columns
    }
    pq.write_table(pa.table(columns), path.with_suffix(".parquet"))


def parse_sites(text: str) -> list[str]:
    """'3' -> site-1..site-3; 'a,b' -> ['a', 'b']."""
    text = text.strip()
    if text.isdigit():
        return [f"site-{i}" for i in range(1, int(text) + 1)]
    return [name.strip() for name in text.split(",")]


def parse_site_columns(text: str | None) -> list[list[str]] | None:
    """'A,B,C;D,E' -> [['A', 'B', 'C'], ['D', 'E']] (names stripped of surrounding spaces)."""
    if text is None:
        return None
    return [[name.strip() for name in group.split(",") if name.strip()] for group in text.split(";")]


def _check_rows(frame: pd.DataFrame, labels: np.ndarray, ids: list[str]) -> None:
    if not (len(frame) == len(labels) == len(ids)):
        raise ValueError(f"{len(frame)} feature rows, {len(labels)} labels and {len(ids)} IDs differ in number")
    if len(set(ids)) != len(ids):
        raise ValueError("row IDs are not unique")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integers 0..C-1, got dtype {labels.dtype}")
    if labels.size == 0 or labels.min() < 0 or labels.max() < 1:
        raise ValueError(f"labels must be integers 0..C-1 with C >= 2, got {sorted(set(labels.tolist()))[:10]}")
    if not all(isinstance(name, str) for name in frame.columns) or frame.columns.has_duplicates:
        raise ValueError(f"column names must be unique strings, got {list(frame.columns)}")
    if DEFAULT_ID_COLUMN in frame.columns:
        raise ValueError(f"a feature column is named {DEFAULT_ID_COLUMN!r}, which the split files use for IDs")


def check_sites(sites: list[str]) -> None:
    if len(sites) < 2:
        raise ValueError(f"vertical FL needs at least 2 sites, got {sites}")
    if len(set(sites)) != len(sites):
        raise ValueError(f"site names must be unique, got {sites}")
    for site in sites:
        if not site or site in (".", "..") or "/" in site or "\\" in site:
            raise ValueError(f"site name {site!r} cannot be a folder name")
        if site == SERVER:
            raise ValueError(f"{SERVER!r} is the server-hosted label party's folder, not a site name")


def _site_columns(frame: pd.DataFrame, sites: list[str], site_columns: list[list[str]] | None) -> list[list[str]]:
    names = list(frame.columns)
    if site_columns is None:
        if len(names) < len(sites):
            raise ValueError(f"{len(names)} columns cannot be split among {len(sites)} sites")
        return [list(group) for group in np.array_split(np.array(names, dtype=object), len(sites))]
    if len(site_columns) != len(sites):
        raise ValueError(f"{len(site_columns)} column lists for {len(sites)} sites")
    seen: dict[str, str] = {}
    for site, group in zip(sites, site_columns):
        if not group:
            raise ValueError(f"site {site!r} gets no columns")
        for name in group:
            if name not in names:
                raise ValueError(f"column {name!r} (site {site!r}) is not in the table; columns: {names}")
            if name in seen:
                raise ValueError(f"column {name!r} is given to both site {seen[name]!r} and site {site!r}")
            seen[name] = site
    unassigned = [name for name in names if name not in seen]
    if unassigned:
        raise ValueError(f"columns {unassigned} are given to no site; list every column")
    return [list(group) for group in site_columns]


def _with_ids(frame: pd.DataFrame, names: list[str], rows: np.ndarray, ids: np.ndarray) -> pd.DataFrame:
    table = frame.iloc[rows][names].reset_index(drop=True)
    table.insert(0, DEFAULT_ID_COLUMN, ids[rows].astype(str))
    return table


def label_frame(labels: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({DEFAULT_ID_COLUMN: ids[rows].astype(str), DEFAULT_LABEL_COLUMN: labels[rows].astype(np.int64)})


def _withlabel_frame(table: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """`table` plus a last label column, matched by ID; rows without a label get an empty cell
    (nullable Int64, so labels are written as '1', never '1.0', and missing ones as nothing)."""
    by_id = labels.set_index(DEFAULT_ID_COLUMN)[DEFAULT_LABEL_COLUMN]
    labeled = table.copy()
    labeled[DEFAULT_LABEL_COLUMN] = table[DEFAULT_ID_COLUMN].map(by_id).astype("Int64")
    return labeled


def _manifest(result: SplitResult, label_owner: str, label_in_table: bool) -> dict[str, Any]:
    return {
        "seed": result.seed,
        "sites": result.sites,
        "label_owner": label_owner,
        "label_in_table": label_in_table,
        "num_classes": result.num_classes,
        "overlap": result.overlap,
        "n_test": len(result.test_labels),
        "test_fraction": result.test_fraction,
        "per_site": {
            site: {
                "columns": part.columns,
                "categorical_columns": part.categorical,
                "n_train": len(part.train),
                "n_aligned": result.overlap,
                "n_unaligned": part.n_unaligned,
                "n_test": len(part.test),
            }
            for site, part in result.parts.items()
        },
    }


def write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8", newline="")


def write_json(path: Path, values: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
