"""`vflflare split`: the command line of vflflare.data.split (tables, image strips, CFL's silo space)."""

from __future__ import annotations

import argparse
import os
import sys

from vflflare.data.image_sources import IMAGE_SOURCES
from vflflare.data.schema import DEFAULT_LABEL_COLUMN
from vflflare.data.sources import SOURCES
from vflflare.data.split.dataset import split_dataset, split_silo_dataset, synthetic_options
from vflflare.data.split.streamed import DATASET as STREAMED_DATASET
from vflflare.data.split.streamed import write_streamed_synthetic
from vflflare.data.split.tables import SERVER, parse_site_columns, parse_sites


def configure_split_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of `vflflare split`."""
    parser.add_argument(
        "--dataset",
        required=True,
        choices=sorted(SOURCES) + [STREAMED_DATASET] + sorted(IMAGE_SOURCES),
        help="table to split, or image dataset to cut into strips (halves for 2 sites, quadrants for 4); "
        f"{STREAMED_DATASET}: N(0, 1) features with a known linear signal, drawn chunk by chunk into Parquet "
        "(for tables too big to hold in memory; needs --format parquet)",
    )
    parser.add_argument(
        "--data-dir", default=os.path.join("..", "shared", "data"), help="folder holding the dataset folders"
    )
    parser.add_argument(
        "--sites", default="2", help="number of sites K (named site-1..site-K) or a comma list of names"
    )
    parser.add_argument(
        "--format",
        dest="table_format",
        choices=("csv", "parquet"),
        default="csv",
        help="write the tables as CSV or as Parquet (faster to load at scale; the job reads either)",
    )
    parser.add_argument("--overlap", type=int, help="N_o, aligned labeled training rows (required unless --silo-space)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="new or empty output folder (becomes VFLFLARE_DATA_ROOT)")
    parser.add_argument(
        "--test-fraction", type=float, default=0.2, help="share of all rows held out as aligned test rows"
    )
    parser.add_argument("--label-owner", default=SERVER, help=f"{SERVER!r} or a site name")
    parser.add_argument(
        "--label-in-table",
        action="store_true",
        help="write the labels as a 'label' column of the label owner's train.csv/test.csv (declared in its "
        "schema.json; empty on unaligned rows) instead of label files; needs a site --label-owner",
    )
    parser.add_argument(
        "--active-site-labels",
        action="store_true",
        help="the label-owning site also holds the labels of its own unaligned rows (VFLHLP's active party); "
        "needs a site --label-owner",
    )
    parser.add_argument(
        "--site-columns",
        help='columns per site, sites separated by ";" and columns by ",", e.g. "A,B,C;D,E" '
        "(default: the dataset's 2-party split for K=2, else even in column order)",
    )
    parser.add_argument(
        "--silo-space",
        action="store_true",
        help="CFL's silo space: every site an equal-width slice of the encoded columns and its own "
        "labels for its own rows (--overlap does not apply)",
    )
    parser.add_argument(
        "--silo-setting",
        default="standard",
        help="with --silo-space: standard, data_imbalance, class_imbalance or mixed (CFL Sec. 5.1)",
    )
    parser.add_argument("--train-rows", type=int, help="images only: a random subset of the training set (default all)")
    parser.add_argument("--test-rows", type=int, help="images only: a random subset of the test set (default all)")
    parser.add_argument("--synthetic-rows", type=int, help="synthetic only (default 10000)")
    parser.add_argument("--synthetic-features", type=int, help="synthetic only (default 20)")
    parser.add_argument("--synthetic-classes", type=int, help="synthetic only (default 2)")


def _synthetic(args: argparse.Namespace) -> dict:
    return synthetic_options(
        args.dataset, args.seed, args.synthetic_rows, args.synthetic_features, args.synthetic_classes
    )


def run_split(args: argparse.Namespace) -> int:
    """`vflflare split`: returns the exit code; bad arguments or data print one error line and give 2."""
    images = args.dataset in IMAGE_SOURCES
    if args.silo_space:
        return _run_silo_split(args)
    if args.overlap is None:
        print("vflflare split: error: --overlap is required (or --silo-space)", file=sys.stderr)
        return 2
    if args.dataset == STREAMED_DATASET:
        return _run_streamed_split(args)
    try:
        done = split_dataset(
            args.dataset,
            args.data_dir,
            parse_sites(args.sites),
            args.overlap,
            args.seed,
            args.out,
            test_fraction=args.test_fraction,
            label_owner=args.label_owner,
            label_in_table=args.label_in_table,
            active_site_labels=args.active_site_labels,
            site_columns=parse_site_columns(args.site_columns),
            train_rows=args.train_rows,
            test_rows=args.test_rows,
            table_format=args.table_format,
            synthetic=_synthetic(args),
        )
    except ValueError as exc:  # DataError included
        print(f"vflflare split: error: {exc}", file=sys.stderr)
        return 2
    result, schemas = done.result, done.schemas
    for site in result.sites:
        part = result.parts[site]
        holds = (
            f"{schemas[site].image_size[0]}x{schemas[site].image_size[1]} strips"
            if images
            else f"{len(part.columns)} columns"
        )
        print(
            f"{site}: {holds}, {len(part.train)} train rows "
            f"({result.overlap} aligned + {part.n_unaligned} unaligned), {len(part.test)} test rows"
        )
    where = args.label_owner
    if args.label_in_table:
        where = f"the {DEFAULT_LABEL_COLUMN!r} column of {args.label_owner}'s tables"
    if args.active_site_labels:
        where += f", including its {result.parts[args.label_owner].n_unaligned} unaligned rows"
    print(f"labels ({result.num_classes} classes) at {where}; manifest: {done.manifest}")
    return 0


def _run_silo_split(args: argparse.Namespace) -> int:
    try:
        if args.overlap is not None or args.label_owner != SERVER or args.active_site_labels or args.label_in_table:
            raise ValueError(
                "--silo-space gives every site its own rows and labels: --overlap, --label-owner, "
                "--label-in-table and --active-site-labels do not apply"
            )
        space, manifest = split_silo_dataset(
            args.dataset,
            args.data_dir,
            parse_sites(args.sites),
            args.seed,
            args.out,
            setting=args.silo_setting,
            test_fraction=args.test_fraction,
            train_rows=args.train_rows,
            test_rows=args.test_rows,
            synthetic=None if args.dataset in IMAGE_SOURCES else _synthetic(args),
        )
    except ValueError as exc:
        print(f"vflflare split: error: {exc}", file=sys.stderr)
        return 2
    for why, count in space.left_out.items():
        if count:
            print(f"left out {count} rows with {why}")
    for site in space.silos:
        pads = sum(c.startswith("pad_") for c in space.columns[site])
        print(
            f"{site}: {len(space.columns[site])} columns{f' ({pads} constant pad)' if pads else ''}, "
            f"{len(space.train[site])} train rows, {len(space.test[site])} test rows, its own labels"
        )
    print(f"silo space ({space.setting}, {space.num_classes} classes); manifest: {manifest}")
    return 0


def _run_streamed_split(args: argparse.Namespace) -> int:
    try:
        if args.table_format != "parquet":
            raise ValueError(f"{STREAMED_DATASET} is written only as Parquet: add --format parquet")
        ignored = {
            "--label-in-table": args.label_in_table,
            "--active-site-labels": args.active_site_labels,
            "--site-columns": args.site_columns is not None,
            "--synthetic-classes": args.synthetic_classes is not None,
            "--train-rows/--test-rows": args.train_rows is not None or args.test_rows is not None,
        }
        if any(ignored.values()):
            given = ", ".join(option for option, set_ in ignored.items() if set_)
            raise ValueError(f"{given} does not apply to {STREAMED_DATASET} (2 classes, columns split evenly)")
        manifest = write_streamed_synthetic(
            args.out,
            parse_sites(args.sites),
            args.synthetic_rows or 10000,
            args.synthetic_features or 20,
            args.overlap,
            args.seed,
            args.test_fraction,
            args.label_owner,
        )
    except ValueError as exc:
        print(f"vflflare split: error: {exc}", file=sys.stderr)
        return 2
    for site, part in manifest["per_site"].items():
        print(
            f"{site}: {len(part['columns'])} columns, {part['n_train']} train rows ({part['n_aligned']} aligned + "
            f"{part['n_unaligned']} unaligned), {part['n_test']} test rows"
        )
    print(
        f"labels (2 classes) at {args.label_owner}; best possible test AUC (the true logit's) "
        f"{manifest['signal']['oracle_test_auc']:.4f}; manifest: {args.out}/manifest.json"
    )
    return 0
