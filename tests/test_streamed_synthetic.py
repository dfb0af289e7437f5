"""`vflflare split --dataset synthetic_linear` (data/split/streamed.py): the scale benchmark's table, drawn chunk
by chunk into Parquet, and the grouped Parquet reads (data/columnar.py) that load its wide tables."""

import hashlib
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from vflflare.cli import main
from vflflare.data import columnar
from vflflare.data.loading import DataRequest, load_site_tables
from vflflare.data.split import streamed

ROWS, FEATURES, OVERLAP = 3000, 30, 2000  # 600 test rows; 400 unaligned rows, 200 per site


def _split(out, *extra: str) -> int:
    args = ["split", "--dataset", "synthetic_linear", "--format", "parquet", "--overlap", str(OVERLAP)]
    return main(
        [*args, "--synthetic-rows", str(ROWS), "--synthetic-features", str(FEATURES), "--out", str(out), *extra]
    )


def _digest(root) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*.*")}


def test_the_split_holds_the_rows_and_signal_it_says(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(streamed, "CHUNK_ROWS", 700)  # several chunks, one across the train/test boundary
    assert _split(tmp_path / "a") == 0
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    ids = {
        site: pq.read_table(tmp_path / "a" / site / "train.parquet").column("id").to_pylist()
        for site in ("site-1", "site-2")
    }
    aligned = [f"syn-{i:07d}" for i in range(OVERLAP)]
    assert ids["site-1"] == aligned + [f"syn-{i:07d}" for i in range(2000, 2200)]
    assert ids["site-2"] == aligned + [f"syn-{i:07d}" for i in range(2200, 2400)]
    labels = pq.read_table(tmp_path / "a" / "server" / "train_labels.parquet")
    assert labels.column("id").to_pylist() == aligned  # only the aligned rows are labeled
    test = pq.read_table(tmp_path / "a" / "site-2" / "test.parquet")
    assert test.num_rows == 600 and test.column_names == ["id", *(f"x{i}" for i in range(15, 30))]
    assert str(test.schema.field("x15").type) == "float"
    assert manifest["per_site"]["site-1"]["n_unaligned"] == 200 and manifest["n_test"] == 600
    signal = manifest["signal"]
    assert len(signal["informative"]) == 2 * streamed.INFORMATIVE and 0.88 < signal["oracle_test_auc"] < 0.96
    assert "best possible test AUC" in capsys.readouterr().out
    monkeypatch.setattr(streamed, "CHUNK_ROWS", 700)
    assert _split(tmp_path / "b") == 0
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")  # the same arguments, the same files


def test_options_it_cannot_honour_are_refused(tmp_path, capsys):
    assert main(["split", "--dataset", "synthetic_linear", "--overlap", "10", "--out", str(tmp_path / "c")]) == 2
    assert "synthetic_linear is written only as Parquet: add --format parquet" in capsys.readouterr().err
    assert _split(tmp_path / "d", "--site-columns", "x0;x1") == 2
    assert "--site-columns does not apply to synthetic_linear" in capsys.readouterr().err
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()


def test_grouped_parquet_reads_load_what_one_group_loads(tmp_path, monkeypatch):
    assert _split(tmp_path / "data") == 0
    request = DataRequest(("site-1", "site-2"), str(tmp_path / "data"))
    whole = load_site_tables("site-1", request)
    monkeypatch.setattr(columnar, "_GROUP_BYTES", 8 * (OVERLAP + 200) * 4)  # train: 4 columns a group; test: more
    grouped = load_site_tables("site-1", request)
    np.testing.assert_array_equal(whole.train.numeric, grouped.train.numeric)
    np.testing.assert_array_equal(whole.test.numeric, grouped.test.numeric)
    assert whole.train.numeric.shape == (2200, 15)


@pytest.mark.parametrize("algorithm", ["vanilla", "oneshot"])
def test_a_job_learns_the_signal(tmp_path, algorithm):
    assert _split(tmp_path / "data") == 0
    oracle = json.loads((tmp_path / "data" / "manifest.json").read_text())["signal"]["oracle_test_auc"]
    out = tmp_path / "result.json"
    args = ["inprocess", "--algorithm", algorithm, "--data-root", str(tmp_path / "data"), "--json", str(out)]
    assert main([*args, "--set", "batch_size=128", "--set", "split_epochs=10"] if algorithm == "vanilla" else args) == 0
    assert json.loads(out.read_text())["metrics"]["test_auc"] >= oracle - 0.05
