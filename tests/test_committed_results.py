"""Issue 26 item 1: a report's tables are rebuilt from committed results, not pasted by hand. Each case
rebuilds a table from benchmarks/results/ as its documented command prints it and finds it, character
for character, in the report. Reads committed files only: no run."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from vflflare.bench.folder import SETTINGS_FILE
from vflflare.bench.report import RESULTS, report_text

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
COMMITTED = BENCHMARKS / "results"

# report -> (results folder, --against folder or None, --paired pairs):
# `vflflare bench report FOLDER [--against AGAINST] [--paired METHOD OTHER ...]`
FAIR = "leaderboard/fair_trees"
TUNED, ALONE_TUNED = "central XGBoost, tuned", "label party alone (XGBoost, all its labels), tuned"
BENCH_TABLES = [
    ("LEADERBOARD.md", "leaderboard/grid_credit_default", None, ()),
    ("LEADERBOARD.md", "leaderboard/grid_adult", None, ()),
    ("LEADERBOARD.md", "leaderboard/default", None, ()),
    ("LEADERBOARD.md", "leaderboard/ple_ensemble3", "leaderboard/default", ()),
    ("LEADERBOARD.md", FAIR, None, (("VFLHLP", TUNED), ("VFLHLP", ALONE_TUNED), ("SS-VFL-I", TUNED),
                                    ("VFLHLP", "central XGBoost"))),
]


def missing_lines(text: str, report: str) -> list[str]:
    """The rebuilt lines the report lacks: what a failure shows instead of two whole documents."""
    return [line for line in text.splitlines() if line not in report.splitlines()]


@pytest.mark.parametrize("report, folder, against, pairs", BENCH_TABLES)
def test_a_bench_table_is_rebuilt_from_its_committed_results(report, folder, against, pairs):
    text = report_text(COMMITTED / folder, COMMITTED / against if against else None, list(pairs))
    markdown = (BENCHMARKS / report).read_text()
    assert text in markdown, missing_lines(text, markdown)


def test_every_committed_bench_folder_backs_a_table_and_stays_small():
    folders = {p.parent.relative_to(COMMITTED).as_posix() for p in COMMITTED.rglob(SETTINGS_FILE)}
    assert folders == {folder for _, folder, _, _ in BENCH_TABLES}
    for folder in folders:  # records, not workspaces: kilobytes
        assert (COMMITTED / folder / RESULTS).stat().st_size < 100_000, folder


def test_reliability_parity_table_is_rebuilt_from_its_committed_records(capsys):
    """RELIABILITY's before/after table is what refactor_parity.py --compare prints for the committed pair."""
    spec = importlib.util.spec_from_file_location("refactor_parity", BENCHMARKS / "refactor_parity.py")
    parity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(parity)
    records = COMMITTED / "issue25_parity"
    assert parity.compare(records / "before.jsonl", records / "after.jsonl") == 0
    text, markdown = capsys.readouterr().out, (BENCHMARKS / "RELIABILITY.md").read_text()
    assert text in markdown, missing_lines(text, markdown)
