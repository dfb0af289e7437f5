"""Shared test fixtures."""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from vflflare.data.sources import load_source
from vflflare.data.split import split_table, write_split

# The benchmark data (credit default, Adult, MNIST, CIFAR-10) lives beside the checkout, never in it: a fresh
# clone has none. A test that needs it carries `@pytest.mark.needs_data("credit_default", ...)` (or asks for
# the `shared_data` fixture) and is skipped with one line when it is absent, unless VFLFLARE_REQUIRE_DATA=1
# (.ci/run sets it), which makes the absence an error, so CI never passes by skipping them.
DATA_DIR_ENV = "VFLFLARE_DATA_DIR"  # where the tests look for it instead of ../shared/data
REQUIRE_DATA_ENV = "VFLFLARE_REQUIRE_DATA"  # "1": a test whose data is absent errors instead of skipping
SHARED_DATA = (
    Path(os.environ[DATA_DIR_ENV])
    if os.environ.get(DATA_DIR_ENV)
    else Path(__file__).resolve().parents[1].parent / "shared" / "data"
)


def absent_data(*datasets: str) -> str | None:
    """Why a test needing `datasets` (folders of the benchmark data; none: the folder itself) cannot run, or None."""
    absent = [str(path) for path in [SHARED_DATA / name for name in datasets] or [SHARED_DATA] if not path.is_dir()]
    if not absent:
        return None
    return f"needs the benchmark data in ../shared/data (or {DATA_DIR_ENV}); absent: {', '.join(absent)}"


def require_data(*datasets: str) -> None:
    """Skip the running test when `datasets` are absent; fail it under VFLFLARE_REQUIRE_DATA=1."""
    reason = absent_data(*datasets)
    if reason is None:
        return
    if os.environ.get(REQUIRE_DATA_ENV, "") not in ("", "0"):
        pytest.fail(f"{reason} ({REQUIRE_DATA_ENV}={os.environ[REQUIRE_DATA_ENV]}: not skipped)", pytrace=False)
    pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_data(*datasets): needs these folders of the benchmark data "
        "(../shared/data or VFLFLARE_DATA_DIR); skipped when absent, an error "
        "under VFLFLARE_REQUIRE_DATA=1",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that starts NVFlare takes seconds to minutes: it belongs to the slow tier."""
    for item in items:
        if item.get_closest_marker("simulator") is not None:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture (a module's split of the data) is set up."""
    marks = list(item.iter_markers("needs_data"))
    if marks:
        require_data(*dict.fromkeys(name for mark in marks for name in mark.args))


@pytest.fixture
def shared_data() -> Path:
    """The real datasets shared by every checkout (never copied into the repo); skips when absent."""
    require_data()
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
