"""The jobs on a real table prepared by `vflflare split`: UCI credit default, 2 parties (10 vs 13
attributes), 1000 aligned rows. Floors sit below the reference reproduction (~0.74 AUC)."""

import pytest
from simulator_helpers import SHARED_DATA, per_site, run_job

from vflflare.cli import main as vflflare_main

pytestmark = [pytest.mark.simulator, pytest.mark.needs_data("credit_default")]


@pytest.fixture(scope="module")
def credit_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("credit") / "data"
    assert (
        vflflare_main(
            [
                "split",
                "--dataset",
                "credit_default",
                "--data-dir",
                str(SHARED_DATA),
                "--sites",
                "2",
                "--overlap",
                "1000",
                "--seed",
                "0",
                "--out",
                str(root),
            ]
        )
        == 0
    )
    return root


@pytest.mark.parametrize("algorithm,uploads,downloads", [("oneshot", 2, 1), ("fewshot", 3, 2)])
def test_credit_default_few_communications(tmp_path, credit_root, algorithm, uploads, downloads):
    results = run_job(tmp_path, algorithm, data_root=credit_root)
    assert "error" not in results, results.get("error")
    assert results["metrics"]["test_auc"] >= 0.70, results["metrics"]
    assert results["rows"] == {"aligned_train": 800, "val": 200, "test": 6000}
    assert per_site(results, "uploads") == {"site-1": uploads, "site-2": uploads}
    assert per_site(results, "downloads") == {"site-1": downloads, "site-2": downloads}


def test_credit_default_vanilla(tmp_path, credit_root):
    results = run_job(tmp_path, "vanilla", data_root=credit_root, split_epochs=15, split_patience=5)
    assert "error" not in results, results.get("error")
    assert results["metrics"]["test_auc"] >= 0.70, results["metrics"]
    epochs, batches = results["training"]["split_epochs"], 25  # 800 rows / 32
    phase = results["communication"]["per_phase"]["split_training"]
    # per epoch and site: one forward upload and one gradient download per batch, one validation upload
    assert phase["downloads"] == 2 * epochs * batches
    assert phase["uploads"] == 2 * (epochs * batches + epochs)
    assert per_site(results, "uploads")["site-1"] == epochs * batches + epochs + 1  # + final val/test reps


def test_credit_default_ssvfl_i_one_upload(tmp_path, credit_root):
    results = run_job(tmp_path, "ssvfl_i", data_root=credit_root)
    assert "error" not in results, results.get("error")
    assert results["metrics"]["test_auc"] >= 0.70, results["metrics"]
    assert per_site(results, "uploads") == {"site-1": 1, "site-2": 1}
    assert per_site(results, "downloads") == {"site-1": 0, "site-2": 0}


def test_credit_default_ssvfl_c(tmp_path, credit_root):
    results = run_job(tmp_path, "ssvfl_c", data_root=credit_root, split_epochs=8, split_patience=4)
    assert "error" not in results, results.get("error")
    assert results["metrics"]["test_auc"] >= 0.70, results["metrics"]
    epochs = results["training"]["split_epochs"]
    assert per_site(results, "downloads")["site-1"] == epochs * 25  # one gradient per batch of 32 of 800 rows
