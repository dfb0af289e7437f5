"""Issue 38: labels.json may map the user's label values to classes (`{"classes": ["No", "Yes"]}`, class id =
position). Loading maps them, an unknown value is an error naming the file, the row and the value; the metrics
are those of the same labels as integers; predictions and results speak the user's values."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from scoring_helpers import score_the_test_rows

from vflflare import cli
from vflflare.data.errors import DataError
from vflflare.data.loading import DataRequest, load_label_tables
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.model_store import LABEL_DIR, models_dir, read_predictions
from vflflare.registry import make_config
from vflflare.results import format_table

SITES = ["site-1", "site-2"]
NAMES = ["No", "Yes"]


def _split(root: Path, *extra: str) -> Path:
    assert cli.main(["split", "--dataset", "breast_cancer", "--overlap", "200", "--out", str(root), *extra]) == 0
    score_the_test_rows(root, SITES)
    return root


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def _name_labels(
    folder: Path, names: list[str] = NAMES, column: int = 1, files=("train_labels.csv", "test_labels.csv")
):
    """Rewrite the label column's integers as names, and declare them in labels.json."""
    for name in files:
        rows = _rows(folder / name)
        for row in rows[1:]:
            if row[column] != "":
                row[column] = names[int(row[column])]
        with (folder / name).open("w", newline="") as f:
            csv.writer(f).writerows(rows)


@pytest.fixture(scope="module")
def named(tmp_path_factory) -> tuple[Path, Path]:
    """The same split twice: integer labels, and the labels as "No"/"Yes" with labels.json naming them."""
    tmp = tmp_path_factory.mktemp("classes")
    plain = _split(tmp / "plain")
    words = tmp / "words"
    shutil.copytree(plain, words)
    _name_labels(words / "server")
    (words / "server" / "labels.json").write_text(json.dumps({"classes": NAMES}))
    return plain, words


def test_loading_maps_the_users_values_to_class_ids(named):
    plain, words = named
    ints = load_label_tables("server", DataRequest(SITES, str(plain)))
    names = load_label_tables("server", DataRequest(SITES, str(words)))
    assert names.classes == NAMES and ints.classes is None and names.num_classes == 2
    assert names.train_labels.tolist() == ints.train_labels.tolist()
    assert names.test_labels.tolist() == ints.test_labels.tolist()


def test_an_unknown_value_names_the_file_the_row_and_the_value(named, tmp_path):
    _, words = named
    root = tmp_path / "root"
    shutil.copytree(words, root)
    rows = _rows(root / "server" / "train_labels.csv")
    rows[3][1] = "Maybe"
    with (root / "server" / "train_labels.csv").open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(DataError) as error:
        load_label_tables("server", DataRequest(SITES, str(root)))
    message = str(error.value)
    assert "train_labels.csv line 4" in message and f"(id {rows[3][0]!r})" in message
    assert "label 'Maybe' is not one of the classes ['No', 'Yes']" in message and "labels.json" in message
    assert "Maybe" not in error.value.public  # the value stays at its party


@pytest.mark.parametrize(
    "spec, problem",
    [
        ({"classes": ["No"]}, "at least 2 label values"),
        ({"classes": ["No", "No"]}, "more than once"),
        ({"classes": ["No", 1]}, "non-empty strings"),
        ({"classes": ["No", "Yes"], "num_classes": 3}, "'num_classes' 3 but 'classes' names 2"),
        ({"classes": ["No", "Yes", "Maybe"]}, "no train or test label is ['Maybe']"),
    ],
)
def test_bad_classes_are_refused_with_the_reason(named, tmp_path, spec, problem):
    _, words = named
    root = tmp_path / "root"
    shutil.copytree(words, root)
    (root / "server" / "labels.json").write_text(json.dumps(spec))
    with pytest.raises(DataError, match="labels.json") as error:
        load_label_tables("server", DataRequest(SITES, str(root)))
    assert problem in str(error.value)


def test_a_label_column_can_name_its_classes(tmp_path):
    root = _split(tmp_path / "root", "--label-owner", "site-1", "--label-in-table")
    folder = root / "site-1"
    header = _rows(folder / "train.csv")[0]
    _name_labels(folder, column=header.index("label"), files=("train.csv", "test.csv"))
    schema = json.loads((folder / "schema.json").read_text())
    (folder / "schema.json").write_text(json.dumps({**schema, "classes": NAMES}))
    tables = load_label_tables("site-1", DataRequest(SITES, str(root)))
    assert tables.classes == NAMES and set(tables.train_labels.tolist()) == {0, 1}
    # the label site tells the coordinator the names (not the labels) for the job's results
    results = run_inprocess(
        make_config(algorithm="oneshot", label_owner="site-1", ssl_epochs=1),
        SITES,
        str(root),
        runs_root=str(tmp_path / "runs"),
    )
    assert results["classes"] == NAMES
    rows = _rows(models_dir(tmp_path / "runs" / "site-1", results["model_id"]) / LABEL_DIR / "test_predictions.csv")
    assert rows[0] == ["id", "score", "predicted"] and {r[2] for r in rows[1:]} <= set(NAMES)


def test_metrics_are_unchanged_and_predictions_speak_the_users_values(named, tmp_path):
    plain, words = named
    runs = {"plain": tmp_path / "plain_runs", "words": tmp_path / "words_runs"}
    ints = run_inprocess(
        make_config(algorithm="oneshot", ssl_epochs=2), SITES, str(plain), runs_root=str(runs["plain"])
    )
    named_run = run_inprocess(
        make_config(algorithm="oneshot", ssl_epochs=2), SITES, str(words), runs_root=str(runs["words"])
    )
    assert named_run["metrics"] == ints["metrics"]  # the same numbers as with integer labels
    assert named_run["classes"] == NAMES and "classes" not in ints
    assert "  classes                      No (0), Yes (1)" in format_table(named_run).splitlines()

    label = models_dir(runs["words"] / "server", named_run["model_id"]) / LABEL_DIR
    rows = _rows(label / "test_predictions.csv")
    assert rows[0] == ["id", "score", "predicted"]
    assert all(row[2] == ("Yes" if float(row[1]) > 0.5 else "No") for row in rows[1:])
    plain_label = models_dir(runs["plain"] / "server", ints["model_id"]) / LABEL_DIR
    assert _rows(plain_label / "test_predictions.csv")[0] == ["id", "score"]  # integer labels: as before
    assert read_predictions(label / "test_predictions.csv") == read_predictions(plain_label / "test_predictions.csv")
    assert json.loads((label / "manifest.json").read_text())["classes"] == NAMES

    scored = run_inprocess(
        make_config(algorithm="vertical_inference", model_job=named_run["model_id"]),
        SITES,
        str(words),
        runs_root=str(runs["words"]),
    )
    path = Path(scored["training"]["predictions"])
    assert _rows(path)[0] == ["id", "score", "predicted"] and {r[2] for r in _rows(path)[1:]} == set(NAMES)
    about = json.loads(path.with_suffix(".json").read_text())
    assert about["classes"] == NAMES and about["score"] == "probability of class 1 ('Yes')"
    assert scored["training"]["classes"] == NAMES
