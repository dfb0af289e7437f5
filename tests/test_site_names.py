"""Issue 28 item 4: the same data and seed give the same numbers whatever the sites are called. A site's
seeds come from its position in the job's site list (the k-th site seeds as "site-k"), never from its name;
before, renaming site-1/site-2 moved one-shot's test AUC on the embedded default from 0.9976 to 0.9952."""

from __future__ import annotations

import pytest

from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config


def counts(result: dict) -> list[tuple[int, int, int]]:
    """Uploads, downloads and payload bytes per site, in site order (the names differ)."""
    return [(c["uploads"], c["downloads"], c["payload_bytes"]) for c in result["communication"]["per_site"].values()]


@pytest.mark.parametrize("algorithm, short", [("oneshot", {"ssl_epochs": 2}), ("vanilla", {"split_epochs": 3})])
def test_renamed_sites_give_the_same_numbers(algorithm, short):
    plain = run_inprocess(make_config({"algorithm": algorithm, **short}), ["site-1", "site-2"], None)
    named = run_inprocess(make_config({"algorithm": algorithm, **short}), ["site-insurer", "site-telco"], None)
    assert named["metrics"] == plain["metrics"]
    assert counts(named) == counts(plain)


def test_a_label_owning_site_keeps_its_numbers_under_another_name():
    short = {"algorithm": "vanilla", "split_epochs": 3}
    plain = run_inprocess(make_config({**short, "label_owner": "site-2"}), ["site-1", "site-2", "site-3"], None)
    named = run_inprocess(make_config({**short, "label_owner": "bank"}), ["alpha", "bank", "clinic"], None)
    assert named["metrics"] == plain["metrics"]
