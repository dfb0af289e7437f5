"""Run a generated job in the real NVFlare simulator and read back its result record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import SHARED_DATA  # noqa: F401 (re-exported: ../shared/data or VFLFLARE_DATA_DIR)

from vflflare.jobs import write_job
from vflflare.simulation import simulate

REPO = Path(__file__).resolve().parents[1]


def run_job(
    tmp_path: Path,
    algorithm: str,
    n_sites: int = 2,
    data_root: Path | None = None,
    timeout: float = 900,
    **overrides: Any,
) -> dict:
    name = f"{algorithm}_job"
    job = write_job(tmp_path / "jobs", name, {"algorithm": algorithm, **overrides})
    return simulate(
        str(job), str(tmp_path / "ws"), n_sites, n_sites, str(data_root) if data_root else None, timeout=timeout
    )


def per_site(results: dict, key: str) -> dict[str, int]:
    return {site: row[key] for site, row in results["communication"]["per_site"].items()}


REP_DIM, FLOAT32 = 32, 4  # representation width of the default bottom model, bytes per float32


def assert_ok(results: dict, floor: float) -> None:
    assert "error" not in results, results.get("error")
    assert results["metrics"]["test_auc"] >= floor, results["metrics"]
    assert results["metrics"]["val_auc"] >= floor, results["metrics"]
