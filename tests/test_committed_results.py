"""Issue 26 item 1: the reports' tables are rebuilt from committed results, not pasted by hand.
`vflflare bench tables` rebuilds every table that names its builder from benchmarks/results/ and compares
it, character for character, with the report. Reads committed files only: no run."""

from __future__ import annotations

import pytest

from vflflare import cli
from vflflare.bench import tables
from vflflare.bench.paths import BENCHMARKS, COMMITTED


def test_every_table_that_names_its_records_is_rebuilt_from_them(capsys):
    code = cli.main(["bench", "tables", "--check"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 tables differ" in out


def test_a_changed_number_is_caught(tmp_path):
    report = tmp_path / "LEADERBOARD.md"
    text = (BENCHMARKS / "LEADERBOARD.md").read_text()
    start = text.index("<!-- table leaderboard/fair_trees 2 -->")
    row = text.index("| 500 |", start)
    report.write_text(text[:row] + text[row:].replace("| 500 |", "| 501 |", 1))
    _, differ, _ = tables.rebuild(report, {})
    assert differ == [f"LEADERBOARD.md:{text[:start].count(chr(10)) + 2} (leaderboard/fair_trees 2)"]


def test_a_table_without_its_source_is_refused(tmp_path):
    report = tmp_path / "NEW_REPORT.md"
    report.write_text("# A report\n\n| method | test AUC |\n|---|---|\n| vanilla | 0.7 |\n")
    with pytest.raises(ValueError, match=r"NEW_REPORT.md:3: a table without a '<!-- table \.\.\. -->' line"):
        tables.rebuild(report, {})


def test_a_table_name_is_registered_once():
    tables.builders()
    with pytest.raises(ValueError, match="registered twice"):
        tables.register("leaderboard/fair_trees", lambda: "")


def test_every_committed_results_file_backs_a_table_and_stays_small():
    used = "\n".join(
        line for report in tables.reports() for line in report.read_text().splitlines() if tables.MARKER.match(line)
    )
    for path in COMMITTED.rglob("*.jsonl"):  # records, not workspaces: about 1 KB a run (the privacy grid: ~450 runs)
        assert path.stat().st_size < 600_000, path
    for name in tables.builders():
        assert f"<!-- table {name} " in used or f"<!-- table {name} -->" in used, name


def test_a_benchmark_refuses_to_resume_into_runs_of_other_settings(tmp_path):
    """Issue 26 item 2 for the report suites (fedhssl, fedhssl_privacy): their resume keys on the run's
    cell, so a file of runs with other --set overrides is refused, naming both."""
    from vflflare.bench.records import append_jsonl, refuse_mixed_settings

    out = tmp_path / "runs.jsonl"
    refuse_mixed_settings(out, {"global_iterations": 10})  # a new file takes any settings
    append_jsonl(out, {"method": "FedHSSL", "overrides": {"global_iterations": 10}})
    refuse_mixed_settings(out, {"global_iterations": 10})
    with pytest.raises(SystemExit, match=r'runs.jsonl holds runs with --set \{"global_iterations": 10\}, not \{\}'):
        refuse_mixed_settings(out, {})


def test_the_parity_comparison_flags_a_moved_number(tmp_path, capsys):
    before = COMMITTED / "issue37_parity" / "before.jsonl"
    assert cli.main(["bench", "parity", str(before), str(COMMITTED / "issue37_parity" / "after.jsonl")]) == 0
    lines = before.read_text().splitlines()
    moved = tmp_path / "after.jsonl"
    moved.write_text("\n".join([lines[0].replace('"test_auc": 0.', '"test_auc": 0.0', 1), *lines[1:]]) + "\n")
    assert cli.main(["bench", "parity", str(before), str(moved)]) == 1
    assert f"{len(lines)} runs compared, 1 differ" in capsys.readouterr().out
