"""The report suites' splits and rows: credit-default (or any table's) splits cut once per argument set, the
rows every method is trained, selected and scored on, and whole source tables for scoring against the truth.

Split seed = job seed: each seed is a fresh draw of the N_o aligned rows and of the test rows, so the
spread over seeds includes which customers happen to be shared, not only the initial weights.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from vflflare.bench.paths import DEFAULT_SPLITS
from vflflare.data.loading import DataRequest, load_label_tables
from vflflare.data.sources import load_source
from vflflare.data.split import parse_sites
from vflflare.data.split.dataset import split_dataset, synthetic_options
from vflflare.protocol.alignment import align, hash_ids
from vflflare.protocol.setup import SERVER, alignment_salt

SITES = ["site-1", "site-2"]
LABEL_LEADER = "site-1"  # the party that would own the labels in the local-only baseline


def prepare_split(
    data_dir: Path,
    overlap: int,
    seed: int,
    splits_dir: Path = DEFAULT_SPLITS,
    dataset: str = "credit_default",
    parties: int = len(SITES),
    label_owner: str | None = None,
    active_site_labels: bool = False,
) -> Path:
    """`vflflare split --dataset D --sites K --overlap N --seed S [--label-owner O [--active-site-labels]]`
    once per argument set."""
    name = f"{dataset}{f'_k{parties}' if parties != len(SITES) else ''}_n{overlap}_s{seed}"
    out = splits_dir / (f"{name}_labels_{label_owner}{'_all' if active_site_labels else ''}" if label_owner else name)
    if not (out / "manifest.json").exists():
        try:
            split_dataset(
                dataset,
                str(data_dir),
                parse_sites(str(parties)),
                overlap,
                seed,
                str(out),
                label_owner=label_owner or SERVER,
                active_site_labels=active_site_labels,
                synthetic=synthetic_options(dataset, seed, None, None, None),
            )
        except ValueError as error:
            raise RuntimeError(
                f"vflflare split failed for {dataset}, {parties} parties, overlap {overlap}, seed {seed}: {error}"
            ) from error
    return out


@dataclass
class SplitRows:
    """IDs of the rows every method is trained, selected and scored on, as the VFL jobs define them."""

    train_ids: list[str]  # aligned labeled rows used for training (canonical order minus validation)
    val_ids: list[str]  # the first ceil(val_fraction * N_o) aligned rows in canonical order
    test_ids: list[str]


def job_rows(
    root: Path, seed: int, val_fraction: float, sites: list[str] = SITES, labeled_fraction: float = 1.0
) -> SplitRows:
    """The alignment a VFL job with this seed computes (same salt, same canonical order)."""
    labels = load_label_tables(SERVER, DataRequest(sites, str(root), seed))
    salt = alignment_salt(seed)
    key = "label:" + SERVER
    digests = hash_ids(labels.train_ids, salt)
    rows = align(
        {key: digests}, {key: hash_ids(labels.test_ids, salt)}, dict(zip(digests, labels.train_labels.tolist())),
        labels.num_classes, val_fraction, seed, SERVER, labeled_fraction,
    )[key]  # fmt: skip
    pick = lambda ids, positions: [ids[i] for i in positions]  # noqa: E731
    return SplitRows(
        pick(labels.train_ids, rows.train), pick(labels.train_ids, rows.val), pick(labels.test_ids, rows.test)
    )


class SourceTable:
    """A whole source table by ID: raw features (categorical columns one-hot), true labels. For the
    baselines that see more than one party (trees, centralized) and for scoring pseudo-labels against
    the truth."""

    def __init__(self, data_dir: Path, dataset: str = "credit_default") -> None:
        frame, labels, ids, categorical, _ = load_source(dataset, data_dir)
        frame = pd.get_dummies(frame, columns=list(categorical), dtype=np.float32) if categorical else frame
        self.frame = frame.set_axis(pd.Index(ids, name="id"))
        self.labels = pd.Series(labels, index=self.frame.index)

    def xy(self, ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return self.frame.loc[ids].to_numpy(np.float32, copy=True), self.y(ids)

    def y(self, ids: list[str]) -> np.ndarray:
        return self.labels.loc[ids].to_numpy(np.int64, copy=True)


@functools.cache
def source_table(data_dir: Path, dataset: str) -> SourceTable:
    """One load per process: the reference runs of every fraction and seed read the same table."""
    return SourceTable(data_dir, dataset)
