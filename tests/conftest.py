"""Shared test fixtures."""
from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from vflflare.data.sources import load_source
from vflflare.data.split import split_table, write_split

SHARED_DATA = Path(__file__).parents[1] / ".." / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real datasets shared by every checkout (never copied into the repo)."""
    return SHARED_DATA


@pytest.fixture
def split_root(tmp_path: Path) -> Path:
    """A valid data root: breast cancer split over site-1, site-2 (seed 0, overlap 150), labels at the server."""
    frame, labels, ids, categorical, _ = load_source("breast_cancer", None)
    result = split_table(frame, labels, ids, ["site-1", "site-2"], overlap=150, seed=0, categorical=categorical)
    root = tmp_path / "root"
    write_split(result, root, label_owner="server", manifest_extra={"dataset": "breast_cancer"})
    return root


@pytest.fixture
def write_csv() -> Callable[[Path, Sequence[str], Sequence[Sequence[object]]], Path]:
    """Write a small CSV (header + rows), creating its folder."""

    def write(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)
        return path

    return write
