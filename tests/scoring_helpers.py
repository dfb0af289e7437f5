"""New rows to score in a split: each site's test rows, as its score.csv."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Sequence
from pathlib import Path

from vflflare.config import SERVER
from vflflare.protocol.scoring import SCORE_FILE


def score_the_test_rows(root: Path, sites: Sequence[str]) -> None:
    """Each site's test.csv copied to its score.csv; with the labels at the coordinator, server/score.csv lists the
    test IDs, the rows that label party wants scored (it scores only IDs it holds)."""
    for site in sites:
        shutil.copy(root / site / "test.csv", root / site / SCORE_FILE)
    if (root / SERVER / "test_labels.csv").is_file():
        with (root / SERVER / "test_labels.csv").open(newline="") as f:
            column = [row[0] for row in csv.reader(f)]
        (root / SERVER / SCORE_FILE).write_text("\n".join(column) + "\n")
