"""Issue 14 items 1-2: a training job leaves each site's f_k and preprocessing and the label party's head
with manifests; the vertical_inference job scores new rows with them and writes predictions.csv at the
label owner. Scoring a split's test rows gives exactly the training job's test predictions."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from scoring_helpers import score_the_test_rows
from simulator_helpers import run_job

from vflflare import cli
from vflflare.data.errors import DataError
from vflflare.data.preprocess import Preprocessor, SiteInput
from vflflare.jobs import write_job
from vflflare.protocol.alignment import AlignmentError
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.model_store import LABEL_DIR, ModelStoreError, config_hash, models_dir, read_predictions
from vflflare.protocol.scoring import predictions_path, read_new_rows, represent_rows
from vflflare.registry import make_config
from vflflare.ssl.augment import TabularBatch

SITES = ["site-1", "site-2"]


def _split(root: Path, **options: str) -> Path:
    """A breast-cancer split whose sites each get their test rows as score.csv (new rows to score)."""
    extra = [arg for key, value in options.items() for arg in (f"--{key.replace('_', '-')}", value)]
    assert cli.main(["split", "--dataset", "breast_cancer", "--overlap", "200", "--out", str(root), *extra]) == 0
    score_the_test_rows(root, SITES)
    return root


def _rewrite(path: Path, edit) -> None:
    """Apply `edit` to the CSV's rows (header first) and write them back."""
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(edit(rows))


def _train_and_score(tmp_path: Path, algorithm: str, data: Path, **settings) -> tuple[dict, dict]:
    runs = tmp_path / "runs"
    trained = run_inprocess(make_config(algorithm=algorithm, **settings), SITES, str(data), runs_root=str(runs))
    scored = run_inprocess(
        make_config(algorithm="vertical_inference", model_job=trained["job_id"]), SITES, str(data), runs_root=str(runs)
    )
    return trained, scored


@pytest.fixture(scope="module")
def oneshot_scored(tmp_path_factory) -> tuple[Path, dict, dict]:
    tmp = tmp_path_factory.mktemp("oneshot")
    trained, scored = _train_and_score(tmp, "oneshot", _split(tmp / "data"))
    return tmp, trained, scored


def test_training_saves_models_with_manifests_and_no_raw_rows(oneshot_scored):
    tmp, trained, _ = oneshot_scored
    job, runs = trained["job_id"], tmp / "runs"
    expected_hash = config_hash(trained["config"])
    for site in SITES:
        folder = models_dir(runs / site, job) / site
        manifest = json.loads((folder / "manifest.json").read_text())
        header = (tmp / "data" / site / "train.csv").read_text().splitlines()[0].split(",")
        assert manifest["algorithm"] == "oneshot" and manifest["config_hash"] == expected_hash
        assert manifest["input_schema"]["columns"] == header[1:] and manifest["input_schema"]["id_column"] == "id"
        assert sorted(manifest["files"]) == ["encoder.pt", "preprocessing.json"] and manifest["created_at"]
        # the preprocessing keeps column statistics, not rows: no ID of the site's table is in it
        text = (folder / "preprocessing.json").read_text()
        assert not any(
            row.split(",")[0] in text for row in (tmp / "data" / site / "train.csv").read_text().splitlines()[1:]
        )
    label = json.loads((models_dir(runs / "server", job) / LABEL_DIR / "manifest.json").read_text())
    assert label["sites"] == SITES and label["config_hash"] == expected_hash and label["label_owner"] == "server"
    assert label["metrics"]["test_auc"] == pytest.approx(trained["metrics"]["test_auc"], abs=1e-12)
    assert trained["label_model"].endswith("manifest.json")


def test_scoring_the_test_rows_gives_the_training_jobs_test_predictions(oneshot_scored):
    tmp, trained, scored = oneshot_scored
    expected = read_predictions(
        models_dir(tmp / "runs" / "server", trained["job_id"]) / LABEL_DIR / "test_predictions.csv"
    )
    got = read_predictions(Path(scored["training"]["predictions"]))
    assert len(got) == len(expected) == trained["rows"]["test"] and got == expected
    assert scored["metrics"]["scored_rows"] == len(expected)
    assert all(report["unmatched"] == 0 for report in scored["training"]["per_site"].values())
    # each site uploads its representations once; ID digests and positions are control messages
    counts = {
        s: {"uploads": c["uploads"], "downloads": c["downloads"]}
        for s, c in scored["communication"]["per_site"].items()
    }
    assert counts == scored["expected_communication"] == {s: {"uploads": 1, "downloads": 0} for s in SITES}


def test_a_parquet_score_file_scores_as_its_csv_twin(oneshot_scored):
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    tmp, trained, scored = oneshot_scored
    data = tmp / "data_parquet_score"
    shutil.copytree(tmp / "data", data)
    for site in SITES:  # every column as the CSV's text: the reader parses the numbers as from the CSV
        text = pa_csv.read_csv(data / site / "score.csv", read_options=pa_csv.ReadOptions(use_threads=False))
        pq.write_table(text, data / site / "score.parquet")
        (data / site / "score.csv").unlink()  # the job's score_file stays score.csv: its Parquet twin is read
    again = run_inprocess(
        make_config(algorithm="vertical_inference", model_job=trained["job_id"]),
        SITES,
        str(data),
        runs_root=str(tmp / "runs"),
    )
    assert read_predictions(Path(again["training"]["predictions"])) == read_predictions(
        Path(scored["training"]["predictions"])
    )


def test_representation_noise_covers_the_scoring_uploads(oneshot_scored):
    """A defense set on the scoring job noises what each site uploads there too, instead of being accepted
    and ignored: every row is still scored, with other probabilities, and the same uploads."""
    tmp, trained, clean = oneshot_scored
    expected = read_predictions(
        models_dir(tmp / "runs" / "server", trained["job_id"]) / LABEL_DIR / "test_predictions.csv"
    )
    scored = run_inprocess(
        make_config(algorithm="vertical_inference", model_job=trained["job_id"], representation_noise=2.0),
        SITES,
        str(tmp / "data"),
        runs_root=str(tmp / "runs"),
    )
    got = read_predictions(Path(scored["training"]["predictions"]))
    assert got.keys() == expected.keys()
    assert sum(got[row] != expected[row] for row in got) > 0.9 * len(got)

    def messages(result: dict) -> dict:
        return {
            s: (c["uploads"], c["downloads"], c["payload_bytes"])
            for s, c in result["communication"]["per_site"].items()
        }

    assert messages(scored) == messages(clean)


def test_a_label_owning_site_scores_split_nn_and_unmatched_rows_are_counted(tmp_path):
    """Trained with float16 on the wire, scoring sends float16 too: its predictions are training's."""
    data = _split(tmp_path / "data", label_owner="site-1")
    _rewrite(data / "site-2" / "score.csv", lambda rows: rows[:-5])  # 5 rows site-2 does not have
    trained, scored = _train_and_score(
        tmp_path, "vanilla", data, label_owner="site-1", split_epochs=5, wire_dtype="float16"
    )
    expected = read_predictions(
        models_dir(tmp_path / "runs" / "site-1", trained["job_id"]) / LABEL_DIR / "test_predictions.csv"
    )
    got = read_predictions(Path(scored["training"]["predictions"]))
    assert str(tmp_path / "runs" / "site-1") in scored["training"]["predictions"]  # written at the label owner
    assert len(got) == len(expected) - 5 and all(got[i] == expected[i] for i in got)
    assert scored["training"]["per_site"]["site-1"]["unmatched"] == 5
    assert scored["training"]["per_site"]["site-2"]["unmatched"] == 0
    reps_bytes = len(got) * trained["config"]["rep_dim"] * 2  # float16: as the model's training sent them
    assert scored["communication"]["per_site"]["site-2"]["payload_bytes"] == reps_bytes
    assert scored["expected_communication"]["site-1"] == {"uploads": 1, "downloads": 1}
    assert {
        s: {"uploads": c["uploads"], "downloads": c["downloads"]}
        for s, c in scored["communication"]["per_site"].items()
    } == scored["expected_communication"]


def _score_error(tmp_path: Path, oneshot_scored, edit, party: str = "site-2") -> str:
    """Score a copy of the trained split after `edit` changed `party`'s score.csv; the error text."""
    tmp, trained, _ = oneshot_scored
    data = tmp_path / f"data{len(list(tmp_path.iterdir()))}"
    shutil.copytree(tmp / "data", data)
    edit(data / party / "score.csv")
    with pytest.raises((DataError, ModelStoreError, ValueError)) as caught:
        run_inprocess(
            make_config(algorithm="vertical_inference", model_job=trained["job_id"]),
            SITES,
            str(data),
            runs_root=str(tmp / "runs"),
        )
    return str(caught.value)


def test_a_missing_column_is_an_error_naming_site_file_and_column(tmp_path, oneshot_scored):
    message = _score_error(tmp_path, oneshot_scored, lambda p: _rewrite(p, lambda rows: [r[:-1] for r in rows]))
    assert "site 'site-2'" in message and "score.csv" in message and "no column" in message


def test_an_extra_column_is_an_error_naming_it(tmp_path, oneshot_scored):
    message = _score_error(
        tmp_path,
        oneshot_scored,
        lambda p: _rewrite(p, lambda rows: [rows[0] + ["postcode"]] + [r + ["1"] for r in rows[1:]]),
    )
    assert "site 'site-2'" in message and "column 'postcode' was not a training column" in message


def test_the_coordinators_list_of_ids_is_checked(tmp_path, oneshot_scored):
    """The label party at the coordinator lists IDs only, each once; a missing list says where it goes."""
    tmp = oneshot_scored[0]

    def error(edit) -> str:
        return _score_error(tmp_path, oneshot_scored, edit, "server")

    two = error(lambda p: _rewrite(p, lambda rows: [r + ["x"] for r in rows]))
    assert "label party 'server'" in two and "score.csv" in two and "IDs to score in one column; it has 2" in two
    again = error(lambda p: _rewrite(p, lambda rows: [*rows, rows[1]]))
    assert "label party 'server'" in again and "score.csv" in again and repr(_first_id(tmp)) in again
    missing = error(lambda p: p.unlink())
    assert "label party 'server'" in missing and "score.csv" in missing and "not found" in missing


def _first_id(tmp: Path) -> str:
    with (tmp / "data" / "server" / "score.csv").open(newline="") as f:
        return list(csv.reader(f))[1][0]


def test_a_changed_model_file_is_refused(tmp_path, oneshot_scored):
    tmp, trained, _ = oneshot_scored
    runs = tmp_path / "runs"
    shutil.copytree(tmp / "runs", runs)
    encoder = models_dir(runs / "site-1", trained["job_id"]) / "site-1" / "encoder.pt"
    encoder.write_bytes(encoder.read_bytes() + b"\0")
    with pytest.raises(ModelStoreError, match="site 'site-1'.*encoder.pt changed since it was saved"):
        run_inprocess(make_config(algorithm="vertical_inference"), SITES, str(tmp / "data"), runs_root=str(runs))


def test_unseen_categories_are_scored_as_unknown_and_counted(tmp_path):
    path = tmp_path / "score.csv"
    path.write_text("id,colour,size\na,red,1.0\nb,mauve,2.0\nc,teal,3.0\nd,blue,4.0\n")
    site_input = SiteInput(
        "id", ["colour"], [], Preprocessor(("colour", "size"), {"size": (2.0, 1.0)}, {"colour": ["blue", "red"]}, {})
    )
    ids, block, checks = read_new_rows("site-1", path, site_input)
    assert ids == ["a", "b", "c", "d"]
    assert checks["unseen_categories"] == {"colour": {"rows": 2, "first_line": 3, "first_value": "mauve"}}
    assert block.numeric.tolist() == [[0, 1, -1], [0, 0, 0], [0, 0, 1], [1, 0, 2]]  # one-hot blue, red; size


@pytest.mark.simulator
def test_the_simulator_trains_then_scores_with_the_shipped_job(tmp_path, monkeypatch):
    """Train one-shot in the NVFlare simulator, then run jobs/vertical_inference (model_job: latest) in a new
    workspace, with nothing set: the models are kept beside the data, not in the wiped workspace."""
    data = _split(tmp_path / "data")
    monkeypatch.delenv("VFLFLARE_RUNS_ROOT", raising=False)
    trained = run_job(tmp_path / "train", "oneshot", data_root=data)
    assert "error" not in trained, trained.get("error")
    scored = cli.simulate(
        str(Path(__file__).resolve().parents[1] / "jobs" / "vertical_inference"),
        str(tmp_path / "score_ws"),
        2,
        2,
        str(data),
    )
    assert "error" not in scored, scored.get("error")
    assert trained["job_id"] == "simulate_job" and trained["model_id"].startswith("oneshot_job-oneshot-")
    expected = read_predictions(models_dir(data, trained["model_id"]) / LABEL_DIR / "test_predictions.csv")
    assert read_predictions(Path(scored["training"]["predictions"])) == expected
    assert scored["metrics"]["scored_rows"] == trained["rows"]["test"]

    # the same model, rows aligned by NVFlare's DH-PSI over the score files, run first in the job; the label
    # party at the coordinator lists some of them and one no site has, and learns which by a PSI round
    _rewrite(data / "site-2" / "score.csv", lambda rows: rows[:-7])  # 7 rows site-2 does not have
    _rewrite(data / "server" / "score.csv", lambda rows: [*rows[:-20], ["nobody"]])
    with (data / "site-2" / "score.csv").open(newline="") as f:
        at_site_2 = {row[0] for row in list(csv.reader(f))[1:]}
    with (data / "server" / "score.csv").open(newline="") as f:
        wanted = [row[0] for row in list(csv.reader(f))[1:]]
    job = write_job(tmp_path / "jobs", "score_with_psi", {"algorithm": "vertical_inference"}, psi=True)
    scored = cli.simulate(str(job), str(tmp_path / "psi_ws"), 2, 2, str(data))
    assert "error" not in scored, scored.get("error")
    got = read_predictions(Path(scored["training"]["predictions"]))
    assert sorted(got) == sorted(i for i in wanted if i in at_site_2) and all(got[i] == expected[i] for i in got)
    assert scored["training"]["label_party"]["unmatched"] == len(wanted) - len(got)
    assert {s: r["unmatched"] for s, r in scored["training"]["per_site"].items()} == {
        "site-1": trained["rows"]["test"] - len(got),
        "site-2": trained["rows"]["test"] - 7 - len(got),
    }
    # the coordinator's PSI round with the first site is control, as the digests are: one upload per site
    assert scored["expected_communication"] == {s: {"uploads": 1, "downloads": 0} for s in SITES}
    assert {
        s: {"uploads": c["uploads"], "downloads": c["downloads"]}
        for s, c in scored["communication"]["per_site"].items()
    } == scored["expected_communication"]
    assert not any(data.rglob("psi_intersection.csv"))  # kept in the job, no training intersection written
    psi = json.loads(next((tmp_path / "psi_ws").rglob("psi_results.json")).read_text())
    assert psi["psi"]["protocol"] == "ecdh"  # the same PSI path as a training job's


def test_psi_scoring_without_a_psi_phase_says_how_to_run_it(tmp_path, oneshot_scored):
    tmp, trained, _ = oneshot_scored
    with pytest.raises(AlignmentError, match="site 'site-1'.*DH-PSI over the score files.*psi=True"):
        run_inprocess(
            make_config(algorithm="vertical_inference", alignment="psi", model_job=trained["job_id"]),
            SITES,
            str(tmp / "data"),
            runs_root=str(tmp / "runs"),
        )


def test_predictions_keep_the_users_row_order_and_id_column_and_never_overwrite(tmp_path):
    data = _split(tmp_path / "data")
    for site in SITES:
        (data / site / "schema.json").write_text(json.dumps({"id_column": "customer"}))
        for name in ("train.csv", "test.csv", "score.csv"):
            _rewrite(data / site / name, lambda rows: [["customer", *rows[0][1:]], *rows[1:]])
        _rewrite(data / site / "score.csv", lambda rows: [rows[0], *reversed(rows[1:])])
    # the label party at the coordinator lists the IDs it wants scored, in an order of its own
    _rewrite(data / "server" / "score.csv", lambda rows: [["customer"], *rows[1:][::3], ["nobody"], *rows[1:][1::3]])
    trained, scored = _train_and_score(tmp_path, "oneshot", data)
    path = Path(scored["training"]["predictions"])
    assert path.name == f"predictions_{trained['model_id']}.csv"  # named after the model that scored
    with path.open(newline="") as f:
        written = list(csv.reader(f))
    with (data / "server" / "score.csv").open(newline="") as f:
        given = [row[0] for row in list(csv.reader(f))[1:]]
    assert written[0] == ["customer", "score"]
    given.remove("nobody")  # an ID no site has is counted, not scored
    assert [row[0] for row in written[1:]] == given  # the label party's own list and order, not the alignment's
    assert scored["training"]["label_party"]["unmatched"] == 1 and scored["metrics"]["scored_rows"] == len(given)
    # a second scoring run with the same model gets a new file
    assert (
        predictions_path(str(tmp_path / "runs" / "server"), trained["model_id"]).name
        == f"predictions_{trained['model_id']}-2.csv"
    )


def test_represent_rows_gives_each_row_its_own_representation_in_the_asked_order():
    """Rows in any order, a subset, or the whole table (then read in slices): each row's f_k as a forward over
    the table in training's chunks gives it, bit for bit, across more than one chunk."""
    torch.manual_seed(0)
    n = 20_000  # 3 chunks of 8192
    batch = TabularBatch(torch.randn(n, 7), torch.randint(0, 3, (n, 2)))

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.linear = torch.nn.Embedding(3, 2), torch.nn.Linear(7 + 4, 5)

        def forward(self, numeric, categorical):
            return self.linear(torch.cat([numeric, self.embed(categorical).flatten(1)], dim=1))

    encoder = Encoder()
    with torch.no_grad():
        whole = torch.cat([encoder(*batch.take(torch.arange(s, min(s + 8192, n)))) for s in range(0, n, 8192)])
    everything = np.arange(n)
    np.testing.assert_array_equal(represent_rows(encoder, batch, everything), whole.numpy())
    shuffled = np.random.default_rng(0).permutation(n)
    np.testing.assert_array_equal(represent_rows(encoder, batch, shuffled), whole.numpy()[shuffled])
    some = np.random.default_rng(1).choice(n, 500, replace=False)
    np.testing.assert_array_equal(represent_rows(encoder, batch, some), whole.numpy()[some])
    assert represent_rows(encoder, batch, np.arange(0)).shape[0] == 0
