"""Fast checks of the phase flows with the in-process driver (same phases, same accounting)."""

import pytest

from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

SITES = ["site-1", "site-2"]


def test_float16_halves_the_payload_and_keeps_the_metric():
    full = run_inprocess(make_config(algorithm="oneshot"), SITES, None)
    half = run_inprocess(make_config(algorithm="oneshot", wire_dtype="float16"), SITES, None)
    for site in SITES:
        assert (
            half["communication"]["per_site"][site]["payload_bytes"] * 2
            == full["communication"]["per_site"][site]["payload_bytes"]
        )
        assert half["communication"]["per_site"][site]["uploads"] == 2
    assert abs(half["metrics"]["test_auc"] - full["metrics"]["test_auc"]) < 0.02


def test_same_seed_same_numbers_other_seed_other_numbers():
    a = run_inprocess(make_config(algorithm="oneshot", seed=3), SITES, None)
    b = run_inprocess(make_config(algorithm="oneshot", seed=3), SITES, None)
    c = run_inprocess(make_config(algorithm="oneshot", seed=4), SITES, None)
    assert a["metrics"] == b["metrics"]
    assert a["metrics"] != c["metrics"]


def test_site_names_are_not_hard_coded():
    sites = ["bank", "insurer", "retailer"]
    results = run_inprocess(make_config(algorithm="fewshot", label_owner="insurer"), sites, None)
    assert results["metrics"]["test_auc"] > 0.9
    assert set(results["communication"]["per_site"]) == set(sites)
    assert results["communication"]["per_site"]["bank"]["uploads"] == 3


def test_unknown_label_owner_is_a_clear_error():
    with pytest.raises(ValueError, match="label_owner 'site-9' is neither 'server' nor one of the sites"):
        run_inprocess(make_config(algorithm="oneshot", label_owner="site-9"), SITES, None)


def test_labels_in_the_owning_sites_own_table(tmp_path):
    from vflflare.cli import main as vflflare_main

    root = tmp_path / "data"
    assert (
        vflflare_main(
            [
                "split",
                "--dataset",
                "breast_cancer",
                "--sites",
                "2",
                "--overlap",
                "150",
                "--seed",
                "0",
                "--label-owner",
                "site-1",
                "--label-in-table",
                "--out",
                str(root),
            ]
        )
        == 0
    )
    results = run_inprocess(make_config(algorithm="oneshot", label_owner="site-1"), SITES, str(root))
    assert results["metrics"]["test_auc"] > 0.9
    assert results["rows"]["aligned_train"] + results["rows"]["val"] == 150


def test_finetune_keeps_the_fewshot_model_unless_validation_improves():
    results = run_inprocess(
        make_config(algorithm="fewshot", ssl_epochs=2, finetune_epochs=3, split_patience=1), SITES, None
    )
    metrics = results["metrics"]
    assert metrics["val_auc"] >= metrics["pre_finetune_val_auc"]
    latency = results["step_latency"]  # every per-batch round trip is timed: 120 training rows = 4 batches
    assert latency["steps"] == 4 * results["training"]["split_epochs"]
    assert 0 < latency["median_ms"] <= latency["p90_ms"]


@pytest.mark.parametrize("label_owner", ["server", "site-2"])
def test_test_curve_scores_every_epoch_without_touching_training_traffic(label_owner):
    cfg = dict(algorithm="vanilla", label_owner=label_owner, split_epochs=4, split_patience=4)
    plain = run_inprocess(make_config(**cfg), SITES, None)
    traced = run_inprocess(make_config(test_curve=True, **cfg), SITES, None)
    assert traced["metrics"] == plain["metrics"]
    phases = traced["communication"]["per_phase_site"]
    assert phases["split_training"] == plain["communication"]["per_phase_site"]["split_training"]
    curve = traced["training"]["test_curve"]
    assert [p["epoch"] for p in curve] == [1, 2, 3, 4]
    # one upload of the test representations per epoch and site; a label-owning site also gets the
    # other site's relayed per epoch
    relayed = {s: 4 if s == label_owner else 0 for s in SITES}
    assert {s: (phases["test_curve"][s]["uploads"], phases["test_curve"][s]["downloads"]) for s in SITES} == {
        s: (4, relayed[s]) for s in SITES
    }
    spent = [p["training_payload_bytes"] for p in curve]
    assert spent[0] > 0 and all(b - a == spent[0] for a, b in zip(spent, spent[1:]))  # equal epochs, equal traffic
    assert spent[-1] == plain["communication"]["per_phase"]["split_training"]["payload_bytes"]
    assert all(0.5 < p["test_auc"] <= 1.0 for p in curve)
