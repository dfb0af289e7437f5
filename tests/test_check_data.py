"""Issue 28 item 3: `vflflare check-data` reports every problem of a site folder or a data root at once,
each with file, line and column, the parties' ID overlap as setup computes it, and exits non-zero on errors."""

from __future__ import annotations

import csv
from pathlib import Path

from vflflare import cli


def edit(path: Path, changes: dict[tuple[int, str], str]) -> list[list[str]]:
    """Set cells by (data row, column name); returns the rows as written (header first)."""
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    for (row, column), value in changes.items():
        rows[row + 1][rows[0].index(column)] = value
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    return rows


def check(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["check-data", *map(str, args)])
    return code, capsys.readouterr().out


def test_a_clean_root_passes_and_shows_the_overlap(split_root, capsys):
    code, out = check(capsys, split_root)
    assert code == 0
    assert out.splitlines()[-1] == "no problems found"
    assert "site-1: ok, " in out and "site-2: ok, " in out and "labels at server: ok, " in out
    assert "150 train rows and 114 test rows are at every party" in out


def test_every_problem_of_a_file_is_reported_at_once(split_root, capsys):
    path = split_root / "site-1" / "train.csv"
    column = next(csv.reader(path.open()))[1]
    rows = edit(path, {(2, column): "abc", (4, column): "inf", (6, "id"): ""})
    edit(path, {(9, "id"): rows[9][0]})  # data row 9 (line 11) takes the ID of data row 8 (line 10)
    for row in range(20, 28):
        edit(path, {(row, column): "x"})
    code, out = check(capsys, split_root)
    assert code == 1
    assert f"{path} line 4 (id '{rows[3][0]}'), column '{column}': non-numeric value 'abc'" in out
    assert f"{path} line 6 (id '{rows[5][0]}'), column '{column}': infinite value 'inf'" in out
    assert f"{path} line 8, column 'id': empty ID" in out
    assert f"line 11 (id '{rows[9][0]}'), column 'id': duplicate ID '{rows[9][0]}', first seen on line 10" in out
    assert f"... and 4 more like the above (train.csv, column '{column}': non-numeric)" in out  # 9, 5 shown
    assert out.splitlines()[-1] == "12 problem(s)"


def test_one_site_folder_and_what_only_the_loader_sees(split_root, capsys):
    code, out = check(capsys, split_root / "site-2")
    assert code == 0 and "site-2: ok" in out and "ID overlap" not in out
    labels = split_root / "server" / "train_labels.csv"
    edit(labels, {(0, "label"): "7"})
    code, out = check(capsys, split_root)
    assert code == 1
    assert f"{labels} line 2" in out and "outside 0..1" in out


def test_ids_that_differ_only_in_spacing_get_the_normalisation_hint(split_root, capsys):
    path = split_root / "site-2" / "test.csv"
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    for row in rows[1:11]:
        row[0] = f" {row[0]}"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    code, out = check(capsys, split_root)
    assert "104 test rows are at every party" in out
    assert "hint: 0 more train and 10 more test rows would align with id_normalize: ['strip']" in out
    code, out = check(capsys, split_root, "--id-normalize", "strip")
    assert "114 test rows are at every party" in out


def test_a_path_that_is_neither_is_an_error(tmp_path, capsys):
    code, out = check(capsys, tmp_path)
    assert code == 1 and "neither a site folder" in out


def test_every_silo_s_labels_are_checked(tmp_path, capsys):
    """A silo space (CFL): each silo holds its own labels, so a bad label in the last silo is found too."""
    root = tmp_path / "silos"
    assert cli.main(["split", "--dataset", "breast_cancer", "--sites", "3", "--silo-space", "--out", str(root)]) == 0
    capsys.readouterr()
    edit(root / "site-3" / "train.csv", {(4, "label"): "maybe"})
    code, out = check(capsys, root)
    assert code == 1
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("labels at")] == [
        "labels at site-1",
        "labels at site-2",
        "labels at site-3",
    ]
    assert "site-3/train.csv line 6 (id 'bc-00004'), column 'label': non-integer label 'maybe'" in out


# ---------------------------------------------------------------- issue 38: score.csv, --data-root, ranges, K >= 2


def test_score_csv_is_checked_like_train_and_test(split_root, capsys):
    """A site's new rows to score (docs/scoring.md) get the same row checks; a clean one is counted."""
    for site in ("site-1", "site-2"):
        (split_root / site / "score.csv").write_text((split_root / site / "test.csv").read_text())
    code, out = check(capsys, "--data-root", split_root)
    assert code == 0, out
    assert "site-1: ok, " in out and ", 114 score rows, " in out and out.splitlines()[-1] == "no problems found"
    score = split_root / "site-2" / "score.csv"
    column = next(csv.reader(score.open()))[1]
    rows = edit(score, {(3, column): "abc"})
    code, out = check(capsys, "--data-root", split_root)
    assert code == 1
    assert f"{score} line 5 (id '{rows[4][0]}'), column '{column}': non-numeric value 'abc'" in out
    assert out.splitlines()[-1] == "1 problem(s)"


def test_the_coordinators_list_of_ids_to_score_is_checked(split_root, capsys):
    """server/score.csv (the IDs a label party at the coordinator asks scores for) is read as a scoring job
    reads it: counted when clean, its repeated ID named with file and line."""
    own = split_root / "server" / "score.csv"
    with (split_root / "server" / "test_labels.csv").open(newline="") as f:
        ids = [row[0] for row in csv.reader(f)]
    own.write_text("\n".join(ids) + "\n")
    code, out = check(capsys, "--data-root", split_root)
    assert code == 0 and f", {len(ids) - 1} IDs to score" in out, out
    own.write_text("\n".join([*ids, ids[1]]) + "\n")
    code, out = check(capsys, "--data-root", split_root)
    assert code == 1 and str(own) in out and repr(ids[1]) in out and f"line {len(ids) + 1}" in out, out


def test_score_csv_needs_the_training_columns(split_root, capsys):
    score = split_root / "site-1" / "score.csv"
    with (split_root / "site-1" / "test.csv").open(newline="") as f:
        rows = [row[:-1] + ["x"] for row in csv.reader(f)]  # its last column replaced by an unknown one
    rows[0][-1] = "not_trained"
    with score.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    code, out = check(capsys, "--data-root", split_root)
    assert code == 1
    assert f"{score}: columns differ from the training columns of {split_root / 'site-1' / 'train.csv'}" in out
    assert "extra ['not_trained']" in out


def test_data_root_option_and_positional_path(split_root, capsys):
    """`--data-root ROOT` as every other command takes it; the positional form still works."""
    assert check(capsys, "--data-root", split_root)[0] == 0
    assert check(capsys, split_root)[0] == 0
    code = cli.main(["check-data", str(split_root), "--data-root", str(split_root / "site-1")])
    assert code == 2 and "not both" in capsys.readouterr().err


def test_an_unstandardisable_value_is_found_beside_a_duplicate_id(split_root, capsys):
    """1e300 (whose variance overflows float64, beyond float32 scaled) was checked only when the file loaded
    cleanly: a duplicate ID in the same file hid it. Now both come at once, and every such column."""
    path = split_root / "site-1" / "train.csv"
    header = next(csv.reader(path.open()))
    first, second = header[1], header[2]
    rows = edit(path, {(5, first): "1e300", (7, second): "-1e300"})
    edit(path, {(9, "id"): rows[9][0]})  # data row 9 (line 11) takes the ID of data row 8 (line 10)
    code, out = check(capsys, "--data-root", split_root)
    assert code == 1
    assert f"line 11 (id '{rows[9][0]}'), column 'id': duplicate ID '{rows[9][0]}', first seen on line 10" in out
    assert f"{path} line 7 (id '{rows[6][0]}'), column '{first}': value 1e+300 is too large to standardise" in out
    assert f"{path} line 9 (id '{rows[8][0]}'), column '{second}': value -1e+300 is too large to standardise" in out
    assert out.splitlines()[-1] == "3 problem(s)"


def test_a_root_with_one_site_is_not_vertical(split_root, capsys):
    """Vertical FL needs K >= 2 sites; a root with one site folder and no manifest said "no problems found"."""
    for path in sorted((split_root / "site-2").iterdir()):
        path.unlink()
    (split_root / "site-2").rmdir()
    (split_root / "manifest.json").unlink()
    code, out = check(capsys, "--data-root", split_root)
    assert code == 1
    assert "only one site folder ('site-1')" in out and "at least 2 sites" in out
    assert "no problems found" not in out
    assert check(capsys, "--data-root", split_root / "site-1")[0] == 0  # one site's own folder is fine alone
