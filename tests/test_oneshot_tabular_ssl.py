"""One-shot's `tabular_ssl` (benchmarks/ONESHOT_TABLES.md, issue 40): `paper` keeps the published numbers bit for
bit, `scarf` warm-starts f_k locally and corrupts FixMatch's strong view by SCARF, still with 2 uploads and 1
download per site."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vflflare.algorithms.oneshot import OneShotSite
from vflflare.config import ConfigError
from vflflare.data.images import SiteImages
from vflflare.data.types import FeatureBlock, SiteTables
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.views import ImageView, TabularView
from vflflare.registry import make_config

torch.set_num_threads(1)
SITES = ["site-1", "site-2"]
# test AUC of the in-process runs at the package defaults on the embedded dataset (data_root None), taken on
# the code before tabular_ssl existed (commit ba0c100): `paper` must reproduce them exactly
ONESHOT_TEST_AUC = 0.9954986149584488
FEWSHOT_TEST_AUC = 0.9958448753462603


def _view(n: int = 600) -> TabularView:
    """A table with few distinct values per column, so 'a value of the reference rows' is a real constraint."""
    rng = np.random.default_rng(0)
    numeric = rng.integers(0, 50, size=(n, 3)).astype(np.float32) / 7
    categorical = rng.integers(0, 9, size=(n, 2)).astype(np.int64)
    block = FeatureBlock(numeric, categorical, [9, 9])
    ids = [f"r{i}" for i in range(n)]
    return TabularView(SiteTables("site-1", ids, block, ids[:5], block.take(np.arange(5)), ["a", "b", "c", "d", "e"]))


def test_scarf_strong_view_takes_the_weak_value_or_one_of_the_reference_rows():
    view = _view()
    reference, others = torch.arange(0, 40), torch.arange(300, 600)  # marginals from 40 rows, applied to others
    views = view.fixmatch_views(reference, 0.2, 0.1, torch.Generator().manual_seed(1), scarf_rate=0.5)
    weak, strong = views(view.batch("train", others))
    ref = view.batch("train", reference)
    for got, kept, pool in zip(strong, weak, ref):  # numeric, then categorical columns
        changed = got != kept
        assert 0.3 < changed.float().mean().item() < 0.55  # rate 0.5, less the draws that equal the weak value
        for j in range(got.shape[1]):
            allowed = set(pool[:, j].tolist())
            assert set(got[changed[:, j], j].tolist()) <= allowed, j
            assert set(got[:, j].tolist()) - allowed <= set(kept[:, j].tolist())


def test_scarf_keeps_the_weak_view_and_its_mask():
    """The weak view draws first from the generator either way: the same weak rows under paper and scarf."""
    view = _view()
    rows, batch = torch.arange(600), view.batch("train", torch.arange(100))
    paper = view.fixmatch_views(rows, 0.2, 0.1, torch.Generator().manual_seed(3))
    scarf = view.fixmatch_views(rows, 0.2, 0.1, torch.Generator().manual_seed(3), scarf_rate=0.3)
    weak_paper, strong_paper = paper(batch)
    weak_scarf, strong_scarf = scarf(batch)
    assert torch.equal(weak_paper.numeric, weak_scarf.numeric)
    assert torch.equal(weak_paper.categorical, weak_scarf.categorical)
    assert torch.equal(strong_paper.categorical, weak_paper.categorical)  # noise leaves categories alone
    assert not torch.equal(strong_scarf.categorical, weak_scarf.categorical)  # SCARF corrupts them too


def test_paper_gives_the_numbers_from_before_tabular_ssl():
    oneshot = run_inprocess(make_config(algorithm="oneshot", tabular_ssl="paper"), SITES, None)
    assert oneshot["metrics"]["test_auc"] == ONESHOT_TEST_AUC
    assert "pretrain_steps" not in oneshot["training"]
    assert [p["name"] for p in oneshot["phases"]] == [
        "setup", "representations", "partial_gradients", "local_ssl", "classifier"]  # fmt: skip
    fewshot = run_inprocess(make_config(algorithm="fewshot"), SITES, None)
    assert fewshot["metrics"]["test_auc"] == FEWSHOT_TEST_AUC


@pytest.mark.parametrize("label_owner", ["server", "site-2"])
def test_scarf_warm_starts_locally_and_keeps_two_uploads_one_download(label_owner):
    results = run_inprocess(make_config(algorithm="oneshot", tabular_ssl="scarf", label_owner=label_owner), SITES, None)
    per_site = results["communication"]["per_site"]
    assert {s: (c["uploads"], c["downloads"]) for s, c in per_site.items()} == {
        s: (e["uploads"], e["downloads"]) for s, e in results["expected_communication"].items()
    }
    feature_sites = [s for s in SITES if s != label_owner]
    assert all((per_site[s]["uploads"], per_site[s]["downloads"]) == (2, 1) for s in feature_sites)
    phases = results["communication"]["per_phase"]
    assert phases["local_pretraining"]["uploads"] == phases["local_pretraining"]["downloads"] == 0
    assert [p["name"] for p in results["phases"]][:3] == ["setup", "local_pretraining", "representations"]
    # the warm start used every local training row (aligned and unaligned), not only the labeled ones
    assert all(n > results["rows"]["aligned_train"] for n in results["training"]["pretrain_rows"].values())
    assert all(steps > 0 for steps in results["training"]["pretrain_steps"].values())
    assert results["metrics"]["test_auc"] >= 0.9


def test_an_image_site_keeps_the_paper_under_scarf():
    cfg = make_config(algorithm="oneshot", tabular_ssl="scarf")
    rng = torch.Generator().manual_seed(0)
    images = SiteImages(
        "site-1", [f"i{k}" for k in range(8)], torch.randn(8, 1, 8, 8, generator=rng), ["t0"],
        torch.randn(1, 1, 8, 8, generator=rng), [0.0], [1.0])  # fmt: skip
    site = OneShotSite("site-1", ImageView(images), cfg, position=0)
    before = [p.detach().clone() for p in site.encoder.parameters()]
    assert site.contrastive_pretrain({}) == {"pretrain": {}}
    assert all(torch.equal(a, b) for a, b in zip(before, site.encoder.parameters()))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"algorithm": "oneshot", "tabular_ssl": "simclr"}, r"tabular_ssl must be one of \['paper', 'scarf'\]"),
        ({"algorithm": "fewshot", "tabular_ssl": "scarf"}, "tabular_ssl few-shot supports only 'paper'"),
    ],
)
def test_a_bad_tabular_ssl_is_refused_naming_it(config, message):
    with pytest.raises(ConfigError, match=message):
        make_config(config)
