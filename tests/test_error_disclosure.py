"""Issue 25 item 3: an error that crosses from a party to the coordinator carries no row ID or value.

Sentinel IDs and values are planted in every error class (a bad value, a bad label at a label-owning
site, a duplicate ID, a test ID without partner, a bad row in a score file); the job fails naming the
site, the file and the line or column, the sentinel is in that site's own log, and no file under the
server's workspace (its logs, vflflare_results.json) holds it."""

from __future__ import annotations

import csv
import shutil
import time
from pathlib import Path

import pytest
from scoring_helpers import score_the_test_rows
from simulator_helpers import run_job

from vflflare import cli
from vflflare.data.errors import DataError
from vflflare.protocol.alignment import AlignmentError
from vflflare.protocol.error_disclosure import public_message
from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

SENTINEL = "SENTINEL"  # every planted ID and value contains it


def _append(path: Path, row_of) -> str:
    """Append `row_of(header)` to the CSV; the new row's line number."""
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    with path.open("a", newline="") as f:
        csv.writer(f).writerow(row_of(rows[0]))
    return str(len(rows) + 1)


def _row(header: list[str], row_id: str, value: str = "1.0", column: int = 1) -> list[str]:
    cells = ["0.5"] * len(header)
    cells[0], cells[column] = row_id, value
    return cells


def _bad_value(root: Path) -> tuple[str, str, str]:
    line = _append(root / "site-1" / "train.csv", lambda h: _row(h, "SENTINELID77", "1.23e200"))
    return "site-1", "train.csv", f"line {line}"


def _non_numeric_value(root: Path) -> tuple[str, str, str]:
    line = _append(root / "site-2" / "train.csv", lambda h: _row(h, "SENTINELID78", "SENTINELVALUE", column=2))
    return "site-2", "train.csv", f"line {line}"


def _duplicate_id(root: Path) -> tuple[str, str, str]:
    _append(root / "site-2" / "train.csv", lambda h: _row(h, "SENTINELDUP"))
    line = _append(root / "site-2" / "train.csv", lambda h: _row(h, "SENTINELDUP"))
    return "site-2", "train.csv", f"line {line}"


def _bad_label(root: Path) -> tuple[str, str, str]:
    line = _append(root / "site-1" / "train_labels.csv", lambda h: ["SENTINELID79", "SENTINEL9"])
    return "site-1", "train_labels.csv", f"line {line}"


def _test_id_without_partner(root: Path) -> tuple[str, str, str]:
    _append(root / "site-1" / "test.csv", lambda h: _row(h, "SENTINELTEST"))
    return "site-1", "test.csv", "1 of"


CASES = {
    "bad_value": _bad_value,
    "non_numeric_value": _non_numeric_value,
    "duplicate_id": _duplicate_id,
    "bad_label": _bad_label,
    "test_id_without_partner": _test_id_without_partner,
}


def _split(root: Path) -> Path:
    assert (
        cli.main(
            ["split", "--dataset", "breast_cancer", "--overlap", "120", "--label-owner", "site-1", "--out", str(root)]
        )
        == 0
    )
    return root


def _assert_withheld(workspace: Path, error: str, site: str, *named: str) -> None:
    for text in (site, *named):
        assert text in error, (text, error)
    assert SENTINEL not in error and "log" in error, error
    leaks = [p for p in (workspace / "server").rglob("*") if p.is_file() and SENTINEL.encode() in p.read_bytes()]
    assert not leaks, f"the coordinator's workspace holds row data: {leaks}"
    kept = [p for p in (workspace / site).rglob("log*.txt") if SENTINEL.encode() in p.read_bytes()]
    assert kept, "the full message belongs in the site's own log"


@pytest.mark.simulator
@pytest.mark.parametrize("case", list(CASES))
def test_errors_reach_the_coordinator_without_row_ids_or_values(tmp_path, case):
    data = _split(tmp_path / "data")
    site, file, where = CASES[case](data)
    start = time.monotonic()
    results = run_job(tmp_path, "oneshot", data_root=data, timeout=300, label_owner="site-1")
    assert time.monotonic() - start < 240  # the job ends; it does not hang until the timeout
    assert "error" in results, "the job should have failed"
    _assert_withheld(tmp_path / "ws", results["error"], site, file, where)


@pytest.mark.simulator
def test_a_bad_score_row_reaches_the_coordinator_without_its_id_or_value(tmp_path, monkeypatch):
    data = _split(tmp_path / "data")
    runs = tmp_path / "runs"
    trained = run_inprocess(
        make_config(algorithm="oneshot", label_owner="site-1"), ["site-1", "site-2"], str(data), runs_root=str(runs)
    )
    assert "error" not in trained
    score_the_test_rows(data, ("site-1", "site-2"))
    line = _append(data / "site-2" / "score.csv", lambda h: _row(h, "SENTINELSCOREID", "SENTINELSCORE"))
    for party in runs.iterdir():  # in process each party has its own runs root; the simulator's sites share one
        shutil.copytree(party, tmp_path / "shared_runs", dirs_exist_ok=True)
    monkeypatch.setenv("VFLFLARE_RUNS_ROOT", str(tmp_path / "shared_runs"))
    scored = cli.simulate(
        str(Path(__file__).resolve().parents[1] / "jobs" / "vertical_inference"), str(tmp_path / "ws"), 2, 2, str(data)
    )
    assert "error" in scored, "the job should have failed"
    _assert_withheld(tmp_path / "ws", scored["error"], "site-2", "score.csv", f"line {line}")


@pytest.mark.parametrize("case", ["bad_value", "non_numeric_value", "duplicate_id"])
def test_the_public_form_of_a_data_error_names_the_place_and_withholds_the_row(tmp_path, case):
    data = _split(tmp_path / "data")
    site, file, where = CASES[case](data)
    with pytest.raises(DataError) as caught:
        run_inprocess(make_config(algorithm="oneshot", label_owner="site-1"), ["site-1", "site-2"], str(data))
    full, public = str(caught.value), public_message(caught.value, f"site '{site}'")
    assert SENTINEL in full and file in full and where in full
    assert SENTINEL not in public and file in public and where in public, public


def test_a_library_error_travels_as_its_type_and_our_frame_only():
    def parse(text: str) -> float:
        return float(text)  # ValueError: could not convert string to float: '<text>'

    with pytest.raises(ValueError) as caught:
        parse("SENTINEL-raw-cell")
    message = public_message(caught.value, "site 'site-1'")
    assert message.startswith("ValueError") and SENTINEL not in message and "site 'site-1''s own log" in message, (
        message
    )
    ours = public_message(AlignmentError("only 3 rows align"), "site 'site-1'")
    assert ours == "AlignmentError: only 3 rows align"
