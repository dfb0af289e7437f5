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
DATA_DIR_ENV = "VFLFLARE_DATA_DIR"  # the one setting for the data folder, when --data-dir is not given
BUILT_IN_DATASETS = frozenset({"breast_cancer", "synthetic"})  # data/sources.py's datasets that read no file


class DataDirError(ValueError):
    """No data folder was named, or the one named is not a folder."""


def resolve_data_dir(given: str | os.PathLike[str] | None = None, *, required: bool = True) -> Path | None:
    """The folder holding the dataset folders: `given` (--data-dir), else $VFLFLARE_DATA_DIR. Nothing else: no
    path of this checkout or of the working directory is guessed. Neither named: an error naming both, or
    None where the runs need no data folder (`required` False: built-in datasets only)."""
    source, chosen = ("--data-dir", given) if given else (DATA_DIR_ENV, os.environ.get(DATA_DIR_ENV))
    if not chosen:
        if not required:
            return None
        raise DataDirError(
            f"no data folder: give --data-dir DIR (e.g. `vflflare bench run SUITE --data-dir DIR`) or set "
            f"{DATA_DIR_ENV}=DIR, DIR holding the dataset folders (credit_default/, adult/, mnist/, ...)"
        )
    path = Path(chosen).expanduser()
    if not path.is_dir():
        raise DataDirError(f"the data folder {path} ({source}) is not a folder; give --data-dir or {DATA_DIR_ENV}")
    return path.resolve()


def needs_data_dir(datasets: object) -> bool:
    """Whether runs on these datasets read a data folder (every dataset but the built-in ones)."""
    return any(dataset not in BUILT_IN_DATASETS for dataset in datasets)
