"""Every algorithm on vertically split images (MNIST and CIFAR-10 strips, a few hundred images), in
process and in the NVFlare simulator, with the communication counts the papers give; and a job whose
sites hold different modalities (images at one site, a table at the other)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from simulator_helpers import SHARED_DATA, per_site, run_job

from vflflare.cli import main as cli_main
from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

pytestmark = pytest.mark.needs_data("mnist", "cifar10")  # every test splits both (the `splits` fixture)

# short runs: enough to show each algorithm learns from strips, not to reach its accuracy
QUICK = {
    "ssl_epochs": 3,
    "split_epochs": 4,
    "split_patience": 4,
    "pretrain_epochs": 2,
    "classifier_epochs": 30,
    "batch_size": 32,
}
ALGORITHMS = {
    "vanilla": {},
    "fedbcd": {},
    "oneshot": {},
    "fewshot": {},
    "fewshot+finetune": {"finetune_epochs": 2},
    "ssvfl_i": {},
    "ssvfl_c": {},
}


def _split(
    root: Path, dataset: str, sites: int, overlap: int, train: int, test: int, label_owner: str = "server"
) -> Path:
    out = root / f"{dataset}_k{sites}"
    assert (
        cli_main(
            [
                "split",
                "--dataset",
                dataset,
                "--data-dir",
                str(SHARED_DATA),
                "--sites",
                str(sites),
                "--overlap",
                str(overlap),
                "--seed",
                "0",
                "--train-rows",
                str(train),
                "--test-rows",
                str(test),
                "--label-owner",
                label_owner,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("image_splits")
    return {
        "mnist": _split(root, "mnist", 2, 200, 800, 200),
        "cifar10": _split(root, "cifar10", 2, 200, 600, 150),
        "mnist_k4": _split(root, "mnist", 4, 200, 800, 200, label_owner="site-3"),
    }


def _config(method: str, **extra):
    algorithm = method.split("+")[0]
    settings = {k: v for k, v in QUICK.items() if k in make_config(algorithm=algorithm).to_dict()}
    return make_config(algorithm=algorithm, **settings, **ALGORITHMS[method], **extra)


def _check_counts(results: dict) -> None:
    """What each site sent and received is what the algorithm's protocol implies."""
    expected = results["expected_communication"]
    for site, row in results["communication"]["per_site"].items():
        assert (row["uploads"], row["downloads"]) == (expected[site]["uploads"], expected[site]["downloads"]), site


@pytest.mark.parametrize("dataset", ["mnist", "cifar10"])
@pytest.mark.parametrize("method", list(ALGORITHMS))
def test_every_algorithm_learns_on_image_halves(splits, dataset, method):
    results = run_inprocess(_config(method, seed=1), ["site-1", "site-2"], str(splits[dataset]))
    assert "error" not in results, results.get("error")
    _check_counts(results)
    # 10 classes, chance 0.10: a few epochs on a few hundred MNIST strips clear it by far. CIFAR-10 at this
    # size stays near chance (benchmarks/IMAGES_REPORT.md has it at scale); here it must run and count.
    if dataset == "mnist":
        assert results["metrics"]["test_accuracy"] >= 0.35, (method, results["metrics"])


@pytest.mark.parametrize("method", ["oneshot", "vanilla", "ssvfl_c"])
def test_quadrants_with_the_labels_at_a_site(splits, method):
    sites = [f"site-{k}" for k in range(1, 5)]
    results = run_inprocess(_config(method, label_owner="site-3"), sites, str(splits["mnist_k4"]))
    assert "error" not in results, results.get("error")
    assert results["label_owner"] == "site-3" and sorted(results["communication"]["per_site"]) == sites
    _check_counts(results)
    assert results["metrics"]["test_accuracy"] >= 0.3, results["metrics"]


@pytest.mark.simulator
def test_oneshot_on_mnist_halves_in_the_simulator(tmp_path, splits):
    results = run_job(tmp_path, "oneshot", data_root=splits["mnist"], ssl_epochs=QUICK["ssl_epochs"])
    assert "error" not in results, results.get("error")
    assert per_site(results, "uploads") == {"site-1": 2, "site-2": 2}
    assert per_site(results, "downloads") == {"site-1": 1, "site-2": 1}
    rows = results["rows"]
    reps = rows["aligned_train"] * 32 * 4
    final = (rows["aligned_train"] + rows["val"] + rows["test"]) * 32 * 4
    assert per_site(results, "payload_bytes") == {"site-1": 2 * reps + final, "site-2": 2 * reps + final}
    # 3 SSL epochs, 160 labeled rows: 0.36-0.47 over seeds 0-5 in process (0.40-0.51 with the per-image views
    # before issue 29); ten classes, chance 0.1
    assert results["metrics"]["test_accuracy"] >= 0.3, results["metrics"]
    reference = run_inprocess(
        make_config(algorithm="oneshot", ssl_epochs=QUICK["ssl_epochs"]), ["site-1", "site-2"], str(splits["mnist"])
    )
    assert reference["metrics"] == results["metrics"]


def test_a_site_with_images_and_a_site_with_a_table(splits, tmp_path):
    """MNIST's left halves at site-1; at site-2 a table of what its right halves show (ink per row and
    per column), the same people in the same rows."""
    root = tmp_path / "mixed"
    source = splits["mnist"]
    (root / "site-2").mkdir(parents=True)
    for name in ("site-1", "server"):
        (root / name).symlink_to(source / name, target_is_directory=True)
    for file in ("manifest.json", "overlap_ids.csv"):
        (root / file).symlink_to(source / file)
    for table in ("train", "test"):
        index = pd.read_csv(source / "site-2" / f"{table}.csv")
        pixels = np.stack(
            [np.asarray(Image.open(source / "site-2" / p), dtype=np.float64) / 255 for p in index["path"]]
        )
        features = {f"ink_row_{r}": pixels[:, r, :].mean(axis=1) for r in range(pixels.shape[1])}
        features.update({f"ink_col_{c}": pixels[:, :, c].mean(axis=1) for c in range(pixels.shape[2])})
        pd.DataFrame({"id": index["id"], **features}).to_csv(root / "site-2" / f"{table}.csv", index=False)

    results = run_inprocess(_config("oneshot"), ["site-1", "site-2"], str(root))
    assert "error" not in results, results.get("error")
    _check_counts(results)
    assert results["rows"]["test"] == 200
    assert results["metrics"]["test_accuracy"] >= 0.5, results["metrics"]
    images_only = json.loads((source / "site-1" / "schema.json").read_text())
    assert images_only["modality"] == "image" and not (root / "site-2" / "schema.json").exists()
