"""One-shot VFL discloses the aligned rows' labels to every feature party: k-means on the partial
gradients it receives recovers them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer

from vflflare.algorithms.blocks.kmeans import kmeans_on_gradients
from vflflare.algorithms.oneshot import OneShotLabel as LabelParty
from vflflare.algorithms.oneshot import OneShotSite as FeatureParty
from vflflare.attacks.leak import cluster_label_agreement
from vflflare.data.types import FeatureBlock, LabelTables, SiteTables
from vflflare.protocol.views import TabularView
from vflflare.registry import make_config

torch.set_num_threads(1)


def test_agreement_is_accuracy_under_best_renaming():
    assert cluster_label_agreement(np.array([1, 1, 0, 0, 2]), np.array([0, 0, 1, 1, 1])) == pytest.approx(0.8)
    assert cluster_label_agreement(np.array([0, 0, 0]), np.array([0, 1, 1])) == pytest.approx(2 / 3)


@pytest.mark.parametrize("seed", [0, 1])
def test_kmeans_on_partial_gradients_recovers_aligned_labels(seed):
    x, y = load_breast_cancer(return_X_y=True)
    x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
    rows = np.random.default_rng(seed).permutation(len(y))[:300]
    sites = ["site-a", "site-b"]
    cfg = make_config(seed=seed, classifier_hidden=0)
    reps = {}
    for position, (site, cols) in enumerate(zip(sites, [slice(0, 15), slice(15, 30)])):
        empty = FeatureBlock(np.zeros((0, 15), np.float32), np.zeros((0, 0), np.int64), [])
        block = FeatureBlock(x[rows, cols], np.zeros((len(rows), 0), np.int64), [])
        party = FeatureParty(
            site, TabularView(SiteTables(site, [str(r) for r in rows], block, [], empty, [])), cfg, position=position
        )
        party.align(np.arange(len(rows)), np.array([], dtype=np.int64), np.array([], dtype=np.int64))
        reps[site] = party.representations(["aligned"])["aligned"]
    tables = LabelTables([str(r) for r in rows], y[rows].astype(np.int64), [], np.zeros(0, np.int64), 2)
    label = LabelParty(tables, sites, cfg)
    label.align(np.arange(len(rows)), np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    grads = label.partial_gradients(reps)
    for site in sites:
        clusters = kmeans_on_gradients(grads[site], 2, seed=0)
        assert cluster_label_agreement(clusters, y[rows]) >= 0.95
