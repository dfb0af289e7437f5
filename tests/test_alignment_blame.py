"""Alignment errors blame the right party and say what fixes it (issue 25, item 4): missing test labels
name the label party and its file, "no shared rows" names every party's rows and the id_normalize hint
(in the exception, the results record and the CLI), the CLI prints errors without a traceback, and
what crosses to the coordinator holds no row ID."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from simulator_helpers import run_job
from test_alignment_report import rewrite_ids, run
from test_psi import make_root, write_true_psi

from vflflare.cli import main
from vflflare.data.split import TEST_LABELS_FILE
from vflflare.protocol.alignment import AlignmentError, positions_in
from vflflare.protocol.alignment_report import partial_test, summarize, unlabeled_test

SENTINEL = "SENTINEL-4711"
WRITTEN = {  # how a party writes the integer ID 12, for every one of its IDs
    "float": lambda row_id: f"{row_id}.0",  # a spreadsheet or pandas export
    "zero_padded": lambda row_id: row_id.zfill(8),
}
HINT_STEP = {"float": "strip_zero_fraction", "zero_padded": "strip_leading_zeros"}


def drop_rows(path: Path, count: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:1] + lines[1 + count :]))


def integer_ids(root: Path, site_2_writes=None) -> None:
    """Every party's IDs become integers ('bc-00012' -> '12'); site-2 writes its own with `site_2_writes`."""
    files = {
        "site-1": ("train.csv", "test.csv"),
        "site-2": ("train.csv", "test.csv"),
        "server": ("train_labels.csv", "test_labels.csv"),
    }
    for party, names in files.items():
        written = site_2_writes if party == "site-2" and site_2_writes else (lambda row_id: row_id)
        for name in names:
            rewrite_ids(root / party / name, lambda i, row_id: written(str(int(row_id.split("-")[-1]))))  # noqa: B023 (used at once)


@pytest.mark.parametrize("alignment", ["hash", "psi"])
@pytest.mark.parametrize("label_owner", ["server", "site-1"])
def test_missing_test_labels_name_the_label_party_and_its_file(tmp_path, alignment, label_owner):
    """The old message blamed the sites ("site-1 and site-2 have test rows with no partner")."""
    root = make_root(tmp_path, label_owner=label_owner)
    write_true_psi(root)
    labels = root / label_owner / TEST_LABELS_FILE
    drop_rows(labels, 10)
    with pytest.raises(AlignmentError) as error:
        run(root, alignment=alignment, label_owner=label_owner)
    first = str(error.value).splitlines()[0]
    if alignment == "hash":
        assert first == f"label party '{label_owner}': {labels} lacks 10 test rows that every other party has"
    else:  # PSI runs among the sites, so only the label party sees the rows it has no label for
        assert first.startswith(
            f"label party '{label_owner}': {labels}: 10 of the 114 test rows the sites share have no test label"
        )


@pytest.mark.parametrize("written", ["float", "zero_padded"])
def test_no_shared_rows_names_each_party_and_the_normalisation(split_root, written):
    integer_ids(split_root)
    clean = run(split_root)
    integer_ids(split_root, WRITTEN[written])
    with pytest.raises(AlignmentError) as error:
        run(split_root)
    assert str(error.value) == (
        "the parties share no training rows (train rows per party: site-1 303, site-2 302, label:server 150); "
        f"hint: 150 more train and 114 more test rows would align with id_normalize: ['{HINT_STEP[written]}'] "
        "(IDs that differ only in those ways)"
    )
    fixed = run(split_root, id_normalize=[HINT_STEP[written]])
    assert fixed["rows"] == clean["rows"] and fixed["metrics"] == clean["metrics"]


def test_the_hint_ends_a_partial_test_error(split_root):
    """With some rows matching the hint was only in the log, not in the error."""
    integer_ids(split_root, lambda row_id: f"{row_id}.0" if int(row_id) % 2 else row_id)
    with pytest.raises(AlignmentError) as error:
        run(split_root)
    assert re.match(
        r"hint: \d+ more train and \d+ more test rows would align with id_normalize: "
        r"\['strip_zero_fraction'\]",
        str(error.value).splitlines()[-1],
    )


@pytest.mark.parametrize("written", ["float", "zero_padded"])
def test_cli_prints_the_error_and_hint_without_a_traceback(split_root, capsys, written):
    integer_ids(split_root, WRITTEN[written])
    command = ["inprocess", "--data-root", str(split_root), "--algorithm", "vanilla", "--set", "split_epochs=1"]
    assert main(command) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: AlignmentError: the parties share no training rows (train rows per party: ")
    assert f"id_normalize: ['{HINT_STEP[written]}']" in err and "Traceback" not in err
    with pytest.raises(AlignmentError):  # --debug lets it through: Python prints the traceback
        main(["--debug", *command])


def test_public_forms_hold_no_id(split_root, caplog):
    """A sentinel ID without partner at site-2 stays in site-2's log."""
    rewrite_ids(split_root / "site-2" / "test.csv", lambda i, row_id: SENTINEL if i == 3 else row_id)
    with caplog.at_level(logging.INFO), pytest.raises(AlignmentError) as error:
        run(split_root)
    assert SENTINEL in caplog.text
    assert SENTINEL not in str(error.value) and SENTINEL not in error.value.public
    assert "(the IDs are in the log of site 'site-2')" in str(error.value)
    owner, ids = "site 'site-2'", ["a", SENTINEL]
    logged: list[str] = []
    problems = partial_test(owner, "test.csv", ids, summarize({"test": [1]})["test"], False, logged.append)
    problems += unlabeled_test(owner, "test_labels.csv", [SENTINEL], 2, False, logged.append)
    assert all(SENTINEL in line for line in logged) and not any(SENTINEL in p for p in problems)
    with pytest.raises(AlignmentError) as error:
        positions_in(ids[:1], ids, owner, "test")
    assert SENTINEL in str(error.value) and SENTINEL not in error.value.public


@pytest.mark.simulator
def test_simulator_result_records_the_hint(split_root, tmp_path):
    integer_ids(split_root, WRITTEN["float"])
    results = run_job(tmp_path, "vanilla", data_root=split_root, timeout=300, split_epochs=1)
    assert results["error"].startswith(
        "AlignmentError: the parties share no training rows (train rows per party: "
        "site-1 303, site-2 302, label:server 150); hint: 150 more train"
    )
    assert "id_normalize: ['strip_zero_fraction']" in results["error"]
