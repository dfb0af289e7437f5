"""No silent row loss at alignment (issue 10, item 1): the alignment report, id_normalize, min_aligned
and test rows without partner. The old code dropped every row below silently."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest
from simulator_helpers import run_job
from test_psi import SITES, make_root, true_intersection

from vflflare.config import ConfigError
from vflflare.data.errors import DataError
from vflflare.protocol.alignment import PSI_FILE, AlignmentError, write_psi_file
from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

FAST = {"algorithm": "vanilla", "split_epochs": 1, "seed": 0}


def rewrite_ids(path: Path, change) -> list[str]:
    """Apply `change(index, id)` to the ID column of a CSV; returns the IDs it changed."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    changed = []
    for i, row in enumerate(rows[1:]):
        new = change(i, row[0])
        if new != row[0]:
            changed.append(new)
            row[0] = new
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)
    return changed


def messy_site_2(root: Path) -> tuple[list[str], list[str]]:
    """site-2 writes some IDs in upper case and some with a trailing space, as exports often do."""

    def change(i: int, row_id: str) -> str:
        return row_id.upper() if i % 3 == 0 else row_id + " " if i % 3 == 1 else row_id

    return rewrite_ids(root / "site-2" / "train.csv", change), rewrite_ids(root / "site-2" / "test.csv", change)


def run(root: Path, **settings) -> dict:
    return run_inprocess(make_config({**FAST, **settings}), SITES, str(root))


def test_report_of_a_clean_run_is_recorded(split_root):
    results = run(split_root)
    report = results["alignment"]
    assert set(report["parties"]) == {"site-1", "site-2", "label:server"}
    for party in SITES:
        assert report["parties"][party]["test"]["matched"] == report["parties"][party]["test"]["rows"] == 114
        assert report["parties"][party]["train"]["matched"] == 150
        assert report["parties"][party]["train"]["rows"] > 150  # each site's unaligned rows
    assert (report["aligned_train"], report["val"], report["test"]) == (120, 30, 114)
    assert report["hint"] is None


def test_test_rows_without_partner_fail_naming_site_file_and_ids(split_root, caplog):
    """The IDs stay in each party's own log: the problems that reach the coordinator hold counts."""
    _, test_changed = messy_site_2(split_root)
    with caplog.at_level(logging.INFO), pytest.raises(AlignmentError) as error:
        run(split_root)
    message = str(error.value)
    assert message.startswith("site 'site-2': test.csv lacks 76 test rows that every other party has\n")
    assert "\nsite 'site-1': test.csv: 76 of 114 test rows have no partner" in message
    assert "\nsite 'site-2': test.csv: 76 of 114 test rows have no partner" in message
    assert f"\nlabel party 'server': {split_root / 'server' / 'test_labels.csv'}: 76 of 114" in message
    assert "(the IDs are in the log of site 'site-2')" in message and "allow_partial_test" in message
    assert "hint: 100 more train and 76 more test rows would align with id_normalize" in message
    assert repr(test_changed[0]) not in message and repr(test_changed[0]) in caplog.text


def test_partial_test_when_allowed_is_reported_with_the_normalisation_hint(split_root, caplog):
    messy_site_2(split_root)
    with caplog.at_level(logging.INFO):
        results = run(split_root, allow_partial_test=True)
    report = results["alignment"]
    assert report["parties"]["site-2"]["test"] == {"rows": 114, "matched": 38}
    assert report["test"] == 38 and results["rows"]["test"] == 38
    assert report["hint"].startswith(
        "100 more train and 76 more test rows would align with id_normalize: ['casefold', 'strip']"
    )
    logged = caplog.text
    assert "left out of scoring (allow_partial_test)" in logged and "hint: 100 more train" in logged


def test_id_normalize_recovers_every_row_and_the_clean_numbers(split_root, tmp_path):
    clean = run(split_root)
    messy_site_2(split_root)
    normalized = run(split_root, id_normalize=["strip", "casefold"])
    assert normalized["rows"] == clean["rows"]
    assert normalized["metrics"] == clean["metrics"]


def test_id_normalize_collision_names_both_lines(split_root):
    path = split_root / "site-1" / "train.csv"
    rewrite_ids(path, lambda i, row_id: {0: "007", 1: "7"}.get(i, row_id))
    with pytest.raises(
        DataError,
        match=r"train.csv line 3 \(id '7'\), column 'id': ID is '7' under id_normalize "
        r"\['strip_leading_zeros'\], like '007' on line 2",
    ):
        run(split_root, id_normalize=["strip_leading_zeros"])


def test_min_aligned_fails_early_with_the_report(split_root):
    with pytest.raises(
        AlignmentError,
        match=r"only 150 training rows align across all parties, min_aligned asks "
        r"for 200 \(rows\); alignment report:\n  site-1 ",
    ):
        run(split_root, min_aligned=200)
    with pytest.raises(AlignmentError, match=r"min_aligned asks for \d+ \(0.9 of the smallest site's \d+ training"):
        run(split_root, min_aligned=0.9)
    assert run(split_root, min_aligned=150)["rows"]["aligned_train"] == 120


def test_bad_id_policy_settings_are_config_errors():
    with pytest.raises(ConfigError, match="id_normalize may hold only"):
        make_config({**FAST, "id_normalize": ["lower"]})
    with pytest.raises(ConfigError, match="min_aligned must be >= 0"):
        make_config({**FAST, "min_aligned": -1})


def test_psi_alignment_reports_and_refuses_unshared_test_rows(tmp_path):
    """With alignment "psi" each party checks its own rows against its PSI output."""
    root = make_root(tmp_path)
    items = true_intersection(root)
    dropped = [item for item in items if item.startswith("test:")][:3]
    for site in SITES:
        write_psi_file(root / site / PSI_FILE, [item for item in items if item not in dropped])
    with pytest.raises(AlignmentError) as error:
        run(root, alignment="psi")
    first = dropped[0].partition(":")[2]
    lines = str(error.value).splitlines()
    assert lines[0].startswith("site 'site-1': test.csv: 3 of 114 test rows have no partner") and first not in lines[0]
    assert lines[1].startswith("site 'site-2': test.csv: 3 of 114")
    assert lines[2].startswith(f"label party 'server': {root / 'server' / 'test_labels.csv'}: 3 of 114")
    results = run(root, alignment="psi", allow_partial_test=True)
    assert results["rows"]["test"] == 111
    assert results["alignment"]["parties"]["site-1"] == {
        "train": {"rows": 303, "matched": 150},
        "test": {"rows": 114, "matched": 111},
    }


@pytest.mark.simulator
def test_simulator_normalises_ids_at_every_party_and_records_the_report(split_root, tmp_path):
    """In NVFlare the label party (server) and the sites normalise alike; messy IDs at site-2 and at
    the label party give the clean run's numbers."""
    clean = run(split_root)
    messy_site_2(split_root)
    for name in ("train_labels.csv", "test_labels.csv"):
        rewrite_ids(split_root / "server" / name, lambda i, row_id: f" {row_id}" if i % 2 else row_id)
    results = run_job(
        tmp_path, "vanilla", data_root=split_root, timeout=300, split_epochs=1, id_normalize=["strip", "casefold"]
    )
    assert "error" not in results, results.get("error")
    assert results["metrics"] == clean["metrics"]
    assert results["alignment"]["parties"]["label:server"]["test"] == {"rows": 114, "matched": 114}


@pytest.mark.parametrize("label_owner", ["server", "site-1"])
def test_single_class_test_labels_fail_before_training(tmp_path, label_owner):
    """The old code trained first and failed at the end with "AUC needs rows of both classes"."""
    root = make_root(tmp_path, label_owner=label_owner)
    folder = root / label_owner
    path = folder / "test_labels.csv"
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    column = rows[0].index("label")
    for row in rows[1:]:
        row[column] = "1"
    with open(path, "w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)
    with pytest.raises(
        AlignmentError,
        match=rf"label party '{label_owner}': the test rows hold only class\(es\) \[1\] "
        r"\(rows per class: aligned \{0: \d+, 1: \d+\}; val \{0: \d+, 1: \d+\}; "
        r"test \{1: 114\}\)",
    ):
        run(root, label_owner=label_owner, split_epochs=50)


def test_only_ids_a_step_could_change_are_run_through_the_steps():
    """might_change (a regular expression over the Arrow array) misses no ID that some normalisation step changes:
    on random IDs of ASCII, whitespace, capitals, zeros and fractions and non-ASCII, the report's steps and the
    variant positions are those of every ID run through every step."""
    import random

    from vflflare.data.ids import ID_NORMALIZATIONS, changing_steps, might_change, normalizer

    rng = random.Random(0)
    alphabet = ["a", "z", "7", "0", "-", "_", ".", "A", "Q", " ", "\t", "\x1c", "\xa0", "é", "e\u0301", "ß", "K"]
    ids = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(20_000)]
    ids += ["12.0", "-4.00", "007", "0", "0.0", "abc", "x.00"]
    full = normalizer(list(ID_NORMALIZATIONS))
    flagged = set(might_change(ids).tolist())
    assert {i for i, row_id in enumerate(ids) if full(row_id) != row_id} <= flagged
    everywhere = set()
    for row_id in ids:
        for name, step in ID_NORMALIZATIONS.items():
            everywhere |= {name} if step(row_id) != row_id else set()
            row_id = step(row_id)
    assert changing_steps(ids, []) == [name for name in ID_NORMALIZATIONS if name in everywhere]
    assert ids.index("abc") not in flagged and ids.index("x.00") in flagged  # IDs are left out, conservatively
