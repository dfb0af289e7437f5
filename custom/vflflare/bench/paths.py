"""Where the bench finds the reports and their committed records: the checkout the package runs from
(benchmarks/ beside custom/), so a worktree's code reads its own reports."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BENCHMARKS = REPO / "benchmarks"
COMMITTED = BENCHMARKS / "results"  # the compact records behind the reports' tables
SCRATCH = Path(os.environ.get("VFLFLARE_BENCH_OUT", "/tmp/vflflare-bench/runs"))  # `bench run`'s default --out
DEFAULT_DATA_DIR = Path(os.environ.get("VFLFLARE_DATA_DIR", REPO.parent / "shared" / "data"))
