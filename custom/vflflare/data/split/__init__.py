"""Cutting one dataset into per-party folders as the few-overlap VFL papers do: tables by columns
(tables.py), images into strips (images.py), CFL's silo space (silo.py). The command line is vflflare.cli.split."""

from vflflare.data.split.tables import (
    MANIFEST_FILE,
    OVERLAP_IDS_FILE,
    SERVER,
    TEST_FILE,
    TEST_LABELS_FILE,
    TRAIN_FILE,
    TRAIN_LABELS_FILE,
    SitePart,
    SplitResult,
    frame_to_csv,
    label_spec,
    parse_site_columns,
    parse_sites,
    partition_rows,
    split_table,
    write_split,
)

__all__ = [
    "MANIFEST_FILE",
    "OVERLAP_IDS_FILE",
    "SERVER",
    "TEST_FILE",
    "TEST_LABELS_FILE",
    "TRAIN_FILE",
    "TRAIN_LABELS_FILE",
    "SitePart",
    "SplitResult",
    "frame_to_csv",
    "label_spec",
    "parse_site_columns",
    "parse_sites",
    "partition_rows",
    "split_table",
    "write_split",
]
