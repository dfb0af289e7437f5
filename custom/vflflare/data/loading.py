"""Where a party's data comes from at job start.

A site reads only its own folder ``<root>/<site>/`` (root from VFLFLARE_DATA_ROOT or the site's
config), so one job folder runs unchanged everywhere. With no root, every party rebuilds the same
in-memory split of scikit-learn's breast cancer table from (sites, seed) -- through the very
`split_table` and CSV parsing the file path uses -- so a first run needs no files and no setup.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from vflflare.data.checks import RowChecks
from vflflare.data.columnar import parquet_twin, read_table, table_path
from vflflare.data.errors import DataError, site_owner
from vflflare.data.ids import normalize_table_ids
from vflflare.data.preprocess import Preprocessor, SiteInput
from vflflare.data.schema import (
    LABELS_FILE,
    MANIFEST_FILE,
    SCHEMA_FILE,
    TEST_FILE,
    TEST_LABELS_FILE,
    TRAIN_FILE,
    TRAIN_LABELS_FILE,
    LabelSpec,
    TableSchema,
    read_label_spec,
    read_table_schema,
)
from vflflare.data.table import (
    ColumnPlan,
    CsvTable,
    check_disjoint,
    check_label_range,
    check_same_columns,
    class_counts,
    parse_column_labels,
    parse_csv,
    parse_features,
    parse_labels,
)
from vflflare.data.types import LabelTables, SiteTables

if TYPE_CHECKING:
    from vflflare.data.images import SiteImages
    from vflflare.data.split import SitePart, SplitResult

DATA_ROOT_ENV = "VFLFLARE_DATA_ROOT"
EMBEDDED_DATASET = "breast_cancer"
EMBEDDED_OVERLAP = 150
EMBEDDED_TEST_FRACTION = 0.2
DEFAULT_NUM_CLASSES = 2  # C without a declared num_classes: more classes are declared, never inferred


@dataclass(frozen=True)
class DataRequest:
    """What a party's data is loaded with: the job's sites, its data root (None: the embedded default),
    the seed (the embedded default's split), the numeric transform and the ID normal forms.

    `sites` keeps the order given: the embedded default's split assigns columns by it. Empty: a caller
    reading one party's files outside a job (benchmarks, tests), so a split's manifest is not checked.
    numeric_transform: how to transform numeric columns before standardising them (preprocess.py), unless
    a site's schema.json says otherwise; labels ignore it. id_normalize: the job's ID normalisation
    (data/ids.py)."""

    sites: tuple[str, ...]
    data_root: str | None = None
    seed: int = 0
    numeric_transform: str = "standard"
    id_normalize: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # callers hold lists (a job's sites, JobConfig.id_normalize): converted here, once, so a request
        # is hashable and no loader can change the caller's list
        object.__setattr__(self, "sites", tuple(self.sites))
        object.__setattr__(self, "id_normalize", tuple(self.id_normalize))


def resolve_data_root() -> str | None:
    """The data root from the environment; None selects the embedded default."""
    return os.environ.get(DATA_ROOT_ENV) or None


def _embedded_csv(owner: str, name: str, frame, id_column: str, plan: ColumnPlan | None = None):
    """The embedded default goes through the same CSV writer and reader as files on disk, so it is
    validated and parsed exactly like a user's data."""
    from vflflare.data.split import frame_to_csv

    return parse_csv(owner, name, io.StringIO(frame_to_csv(frame)), id_column, plan=plan)


def load_site_tables(site: str, request: DataRequest) -> SiteTables:
    """Read, validate and locally preprocess feature party `site`'s train and test tables.

    The site's schema.json "numeric_transform" wins over the request's: the site's own setting over the
    job's. The request's sites are checked against a split's manifest; with its seed, they also choose the
    embedded default's split (data_root None)."""
    owner = site_owner(site)
    id_normalize = request.id_normalize
    schema, read = _site_reader(owner, site, request)
    # The test table is read while the train table is preprocessed (numpy on one core, the reader on the
    # others). Neither holds its float64 columns in memory: a Parquet file and a CSV file's temporary file
    # (data/spill.py) give them a column at a time. The checks are those of a joint read; only when both
    # files are bad does the train file's error now come first.
    train_csv = read(TRAIN_FILE)
    with ThreadPoolExecutor(1) as reader:
        test_read = reader.submit(read, TEST_FILE)
        normalize_table_ids(train_csv, schema.id_column, id_normalize)
        train = parse_features(train_csv, schema)
        transform = schema.numeric_transform or request.numeric_transform
        preprocessor = Preprocessor.fit(train, numeric_transform=transform, missing=schema.missing)
        missing = RowChecks(train, {}, {})  # the training rows' missing cells, counted as the columns are scaled
        train_block = preprocessor.transform(train, release=True, inspect=missing.column)  # float64 freed
        train_missing = missing.missing
        test_csv = test_read.result()
    normalize_table_ids(test_csv, schema.id_column, id_normalize)
    check_same_columns(train_csv, test_csv)
    test = parse_features(test_csv, schema)
    check_disjoint(train_csv, test_csv)
    test_block, checks = preprocessor.checked_transform(test)
    tables = SiteTables(
        site=site,
        train_ids=train.ids,
        train=train_block,
        test_ids=test.ids,
        test=test_block,
        feature_names=preprocessor.feature_names,
        numeric_transform=transform,
        log_columns=list(preprocessor.log_columns),
        site_input=SiteInput(
            schema.id_column, list(schema.categorical_columns), list(id_normalize), preprocessor, schema.missing
        ),
        data_checks={**checks, "train_missing": train_missing} if train_missing else checks,
    )
    del train_csv, test_csv, train, test  # the parsed columns and row lines: only messages needed them
    _return_free_memory()
    return tables


def load_site_data(site: str, request: DataRequest) -> SiteTables | SiteImages:
    """A feature party's data: its images when its schema.json says `modality: image`, else its tables
    (load_site_tables)."""
    if request.data_root is not None:
        owner = site_owner(site)
        check_sites_match(owner, request.data_root, request.sites)
        folder = _party_folder(owner, site, request.data_root)
        schema = read_table_schema(owner, folder / SCHEMA_FILE)
        if schema.modality == "image":  # torch and MONAI, imported by image sites only
            from vflflare.data.images import load_site_images

            return load_site_images(owner, site, folder, schema, request.id_normalize)
    return load_site_tables(site, request)


def _return_free_memory() -> None:
    """Give the free memory that Arrow's pool and glibc's heap keep for reuse back to the OS. Once glibc has
    raised its mmap threshold, arrays of a few MB (the test table's float64 columns) come from the heap,
    which returns memory by itself only from its top: without this, a large table's freed columns would
    stay in the site's memory for the whole job (about 100 MB at 1M rows x 50 columns)."""
    pa.default_memory_pool().release_unused()
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


def _site_reader(owner: str, site: str, request: DataRequest) -> tuple[TableSchema, Callable[[str], CsvTable]]:
    """A site's schema, and a reader of its train or test table by file name. Numbers are parsed while
    reading, never kept as strings, so a large table fits in memory (table.py, ColumnPlan)."""
    data_root = request.data_root
    if data_root is None:
        part = _embedded_part(site, request)
        source = f"<embedded {EMBEDDED_DATASET} split>/{site}"
        schema = TableSchema(categorical_columns=tuple(part.categorical))
        frames = {TRAIN_FILE: part.train, TEST_FILE: part.test}
        plan = ColumnPlan.features(schema)
        return schema, lambda name: _embedded_csv(owner, f"{source}/{name}", frames[name], schema.id_column, plan)
    check_sites_match(owner, data_root, request.sites)
    folder = _party_folder(owner, site, data_root)
    schema = read_table_schema(owner, folder / SCHEMA_FILE)
    if schema.modality != "table":
        raise DataError.at(owner, folder / SCHEMA_FILE, f"modality {schema.modality!r}: not a table (load_site_view)")
    paths = {name: table_path(owner, folder, name) for name in (TRAIN_FILE, TEST_FILE)}
    for path in paths.values():  # a missing test table fails at once, not after preprocessing the train table
        if not path.is_file():
            raise DataError.at(owner, path, "file not found")
    plan = ColumnPlan.features(schema)
    return schema, lambda name: read_table(owner, paths[name], schema.id_column, plan=plan)


def load_label_tables(owner: str, request: DataRequest, *, active_site_labels: bool = False) -> LabelTables:
    """Read and validate the label party's labels from ``<root>/<owner>/`` (owner "server" or a site).

    Labels come from label files (train_labels.csv, test_labels.csv, optional labels.json), or, for
    a site whose schema.json declares 'label_column', from that column of its train.csv (empty cell =
    unlabeled row) and test.csv. Both at once is an error: preferring one would silently ignore the
    other. With data_root None the labels of the embedded default split go to whoever asks, whatever
    the name; with `active_site_labels` a site owner also gets those of its own unaligned rows (as
    `vflflare split --active-site-labels` writes them). The request's numeric_transform plays no part."""
    who = f"label party {owner!r}"
    data_root, id_normalize = request.data_root, request.id_normalize
    if data_root is None:
        from vflflare.data.split import label_spec

        result = _embedded_split(request)
        spec = label_spec(result)
        source = f"<embedded {EMBEDDED_DATASET} split>/{owner}"
        train_labels = result.train_labels
        if active_site_labels and owner in result.local_labels:
            import pandas as pd

            train_labels = pd.concat([train_labels, result.local_labels[owner]], ignore_index=True)
        train_csv = _embedded_csv(who, f"{source}/{TRAIN_LABELS_FILE}", train_labels, spec.id_column)
        test_csv = _embedded_csv(who, f"{source}/{TEST_LABELS_FILE}", result.test_labels, spec.id_column)
    else:
        check_sites_match(who, data_root, request.sites)
        folder = _party_folder(who, owner, data_root)
        schema = read_table_schema(who, folder / SCHEMA_FILE)
        if schema.label_column is not None:
            return _column_labels(who, folder, schema, id_normalize)
        spec = read_label_spec(who, folder / LABELS_FILE)
        train_csv = read_table(who, table_path(who, folder, TRAIN_LABELS_FILE), spec.id_column)
        test_csv = read_table(who, table_path(who, folder, TEST_LABELS_FILE), spec.id_column)
    for table in (train_csv, test_csv):
        normalize_table_ids(table, spec.id_column, id_normalize)
    train_labels = parse_labels(train_csv, spec)
    test_labels = parse_labels(test_csv, spec)
    check_disjoint(train_csv, test_csv)
    return _label_tables(spec, LABELS_FILE, train_csv, train_labels, test_csv, test_labels)


def _column_labels(who: str, folder: Path, schema: TableSchema, id_normalize: Sequence[str]) -> LabelTables:
    """Labels from the declared label column of the site's own train.csv / test.csv."""
    assert schema.label_column is not None
    tables = [folder / name for name in (TRAIN_LABELS_FILE, TEST_LABELS_FILE)]
    label_files = [*tables, *map(parquet_twin, tables), folder / LABELS_FILE]  # a table may be Parquet; labels.json not
    present = [path.name for path in label_files if path.exists()]
    if present:
        raise DataError.at(
            who,
            folder / SCHEMA_FILE,
            f"declares 'label_column' {schema.label_column!r} in {TRAIN_FILE}/{TEST_FILE}, but the folder also has "
            f"label files {present}; keep the labels in one place (remove the label files or 'label_column')",
        )
    spec = schema.label_spec()
    # only the ID and label columns: the features are the site's business, not the label party's
    plan = ColumnPlan.only([spec.id_column, spec.label_column])
    train_table = read_table(who, table_path(who, folder, TRAIN_FILE), spec.id_column, plan=plan)
    test_table = read_table(who, table_path(who, folder, TEST_FILE), spec.id_column, plan=plan)
    for table in (train_table, test_table):
        normalize_table_ids(table, spec.id_column, id_normalize)
    train_csv, train_labels = parse_column_labels(train_table, spec, every_row=False)
    test_csv, test_labels = parse_column_labels(test_table, spec, every_row=True)
    check_disjoint(train_table, test_table)
    return _label_tables(spec, SCHEMA_FILE, train_csv, train_labels, test_csv, test_labels)


def _label_tables(
    spec: LabelSpec,
    declared_in: str,
    train_csv: CsvTable,
    train_labels: np.ndarray,
    test_csv: CsvTable,
    test_labels: np.ndarray,
) -> LabelTables:
    num_classes = spec.num_classes or _default_num_classes(
        spec, declared_in, train_csv, train_labels, test_csv, test_labels
    )
    per_class = class_counts(np.concatenate([train_labels, test_labels]))
    if len(per_class) < num_classes and spec.classes is not None:
        absent = [name for c, name in enumerate(spec.classes) if c not in per_class]
        raise DataError.at(
            train_csv.owner,
            Path(train_csv.source).parent / declared_in,
            f"declares the classes {list(spec.classes)} but no train or test label is {absent}; "
            f'remove {"it" if len(absent) == 1 else "them"} from "classes"',
        )
    if len(per_class) < num_classes:
        # a declared C above the classes present would silently change the metric (accuracy for AUC)
        raise DataError.at(
            train_csv.owner,
            Path(train_csv.source).parent / declared_in,
            f"declares num_classes {num_classes} but the train and test labels hold {len(per_class)} "
            f"classes (rows per class: {per_class}); set num_classes to {len(per_class)}, or remove it "
            f"to infer it",
        )
    assert train_csv.ids is not None and test_csv.ids is not None
    source = train_csv.source if declared_in == LABELS_FILE else f"column {spec.label_column!r} of {train_csv.source}"
    return LabelTables(
        train_ids=train_csv.ids,
        train_labels=train_labels,
        test_ids=test_csv.ids,
        test_labels=test_labels,
        num_classes=num_classes,
        train_source=source,
        id_column=spec.id_column,
        classes=list(spec.classes) if spec.classes is not None else None,
    )


def _default_num_classes(
    spec: LabelSpec,
    declared_in: str,
    train_csv: CsvTable,
    train_labels: np.ndarray,
    test_csv: CsvTable,
    test_labels: np.ndarray,
) -> int:
    """Without a declared num_classes a job is binary (C = 2), and a label outside 0..1 is an error that
    says how to declare more classes. (C used to be the number of distinct labels: one stray third value
    turned a binary job into a 3-class one and its metric from AUC into accuracy, without a word.)"""
    present = np.unique(np.concatenate([train_labels, test_labels])).tolist()
    if len(present) < 2:
        raise train_csv.error(f"all labels are {int(train_labels[0])}; a classifier needs at least 2 classes")
    why = f"by default, as {declared_in} declares no num_classes"
    if present == list(range(len(present))):  # classes 0..C-1, every one present: C is what is missing
        why += f'; for a {len(present)}-class job declare "num_classes": {len(present)} in {declared_in}'
    else:  # the labels need fixing first
        why += "; number the classes 0..C-1 with every class present"
    check_label_range(train_csv, train_labels, DEFAULT_NUM_CLASSES, spec.label_column, why)
    check_label_range(test_csv, test_labels, DEFAULT_NUM_CLASSES, spec.label_column, why)
    return DEFAULT_NUM_CLASSES


def check_sites_match(owner: str, data_root: str, sites: Sequence[str]) -> None:
    """A data root written by `vflflare split` names the sites it was split for (manifest.json): the job
    must run with exactly those, or rows and columns of the missing sites would be dropped silently.
    `sites` empty: a caller reading one party's files outside a job (benchmarks, tests); not checked."""
    manifest = Path(data_root) / MANIFEST_FILE
    if not sites or not manifest.is_file():
        return  # no job, or a site's own folder rather than a split: nothing to compare
    try:
        split_sites = list(json.loads(manifest.read_text())["sites"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DataError.at(owner, manifest, f"unreadable split manifest ({error})") from error
    missing, extra = sorted(set(split_sites) - set(sites)), sorted(set(sites) - set(split_sites))
    if missing or extra:
        problems = [f"sites of the split missing from the job: {missing}"] if missing else []
        problems += [f"sites of the job not in the split: {extra}"] if extra else []
        raise DataError.at(
            owner,
            manifest,
            f"the data was split for sites {split_sites} but the job runs with "
            f"{sorted(sites)}; "
            + "; ".join(problems)
            + " (run with the split's sites, e.g. `-n`/`--sites`, or split again)",
        )


def check_silo_space(site: str, data_root: str | None, algorithm: str) -> None:
    """A silo-space plug-in needs each site's own labels: refuse the embedded default and aligned splits."""
    how = "split with `vflflare split --dataset D --sites N --silo-space`, or give every site a label column"
    if data_root is None:
        raise ValueError(
            f"site '{site}': algorithm '{algorithm}' trains on a silo space (each site its own rows and "
            f"labels), and the embedded default is an aligned split; {how}"
        )
    manifest = Path(data_root) / MANIFEST_FILE
    if manifest.is_file() and not json.loads(manifest.read_text()).get("silo_space"):
        raise ValueError(
            f"site '{site}': {manifest} is an aligned split (labels at one party), but algorithm "
            f"'{algorithm}' needs each site's own labels; {how}"
        )


def _party_folder(owner: str, name: str, data_root: str) -> Path:
    root = Path(data_root)
    if not root.is_dir():
        raise DataError.at(owner, root, f"data root does not exist (set {DATA_ROOT_ENV} or the site's data root)")
    folder = root / name
    if not folder.is_dir():
        existing = sorted(path.name for path in root.iterdir() if path.is_dir())
        raise DataError.at(owner, folder, f"data folder does not exist; {root} has folders {existing}")
    return folder


def _embedded_split(request: DataRequest) -> SplitResult:
    # imported here: they bring pandas (0.3-0.4 s), which a job on the user's own files never needs
    from vflflare.data.sources import load_source
    from vflflare.data.split import split_table

    frame, labels, ids, categorical, _ = load_source(EMBEDDED_DATASET, None)
    return split_table(
        frame,
        labels,
        ids,
        list(request.sites),
        EMBEDDED_OVERLAP,
        request.seed,
        EMBEDDED_TEST_FRACTION,
        categorical=categorical,
    )


def _embedded_part(site: str, request: DataRequest) -> SitePart:
    if site not in request.sites:
        raise DataError(f"{site_owner(site)}: not one of the sites {list(request.sites)} of the embedded default data")
    return _embedded_split(request).parts[site]
