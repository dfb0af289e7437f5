"""Where the bench finds the reports and their committed records: the checkout the package runs from
(benchmarks/ beside custom/), so a worktree's code reads its own reports."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BENCHMARKS = REPO / "benchmarks"
COMMITTED = BENCHMARKS / "results"  # the compact records behind the reports' tables
RUNS = BENCHMARKS / "runs"  # the report scripts' scratch: workspaces, models (git-ignored)
SCRATCH = Path(os.environ.get("VFLFLARE_BENCH_OUT", "/tmp/vflflare-bench/runs"))  # `bench run`'s default --out
DEFAULT_SPLITS = Path("/tmp/vflflare-bench/splits")  # splits are cut once per argument set and reused
DEFAULT_DATA_DIR = Path(os.environ.get("VFLFLARE_DATA_DIR", REPO.parent / "shared" / "data"))
