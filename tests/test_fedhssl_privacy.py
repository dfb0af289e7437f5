"""FedHSSL's privacy evaluation (Section VI): ISO noise (Eq. 7), the model-completion attack and CAP (Eq. 8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_parties import build

from vflflare.algorithms.fedhssl import HybridSSLSite
from vflflare.algorithms.vanilla import SplitNNLabelParty
from vflflare.attacks.model_completion import AUX_ROWS, cap, model_completion_attack
from vflflare.privacy.iso import iso, iso_sigma
from vflflare.registry import make_config


def test_iso_sigma_is_lambda_times_the_largest_row_norm_over_sqrt_m():
    d = torch.tensor([[3.0, 4.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])  # row norms 5 and 1, m = 4
    assert iso_sigma(d, 5.0) == pytest.approx(5.0 * 5.0 / math.sqrt(4))
    generator = torch.Generator().manual_seed(0)
    assert iso(d, 0.0, generator) is d
    assert torch.equal(generator.get_state(), torch.Generator().manual_seed(0).get_state())  # no draw at 0
    noisy = torch.stack(
        [iso(torch.zeros(1, 4) + torch.tensor([[3.0, 4.0, 0.0, 0.0]]), 2.0, generator) for _ in range(4000)]
    )
    assert (noisy - torch.tensor([3.0, 4.0, 0.0, 0.0])).std().item() == pytest.approx(2.0 * 5.0 / 2.0, rel=0.05)
    with pytest.raises(ValueError, match="ISO strength must be >= 0"):
        iso(d, -1.0, generator)


def test_cap_is_the_mean_of_utility_times_recovery_error():
    assert cap([0.8, 0.6], [0.75, 0.5]) == pytest.approx((0.8 * 0.25 + 0.6 * 0.5) / 2)
    with pytest.raises(ValueError):
        cap([0.8], [])


def _pretrained(**overrides):
    cfg = make_config(
        algorithm="fedhssl", projector=[64, 64, 64], predictor_hidden=16, pretrain_batch_size=32, **overrides
    )
    parties, label = build(cfg, site_class=HybridSSLSite, label_class=SplitNNLabelParty)
    for _ in range(2):
        for party in parties.values():
            party.guided_local_ssl({"iteration": 0})
    return parties, label


def test_model_completion_on_a_tiny_split_beats_chance_without_iso():
    parties, label = _pretrained()
    adversary = parties["site-b"]  # a party without labels
    aligned, test = adversary.representations(["aligned", "test"]).values()
    y_aligned, y_test = label.part_labels("aligned").numpy(), label.part_labels("test").numpy()
    recovered = model_completion_attack(aligned[:AUX_ROWS], y_aligned[:AUX_ROWS], test, y_test)
    chance = max(np.mean(y_test), 1 - np.mean(y_test))  # always answering the majority class
    assert recovered["accuracy"] > chance + 0.1, (recovered, chance)
    assert recovered["auc"] > 0.8
    with pytest.raises(ValueError, match="at least 2 classes"):
        model_completion_attack(aligned[:3], np.zeros(3), test, y_test)


def test_iso_gradients_reach_only_the_parties_without_labels():
    cfg = make_config(algorithm="vanilla", label_owner="site-a", iso_gradients=5.0)
    plain_cfg = make_config(algorithm="vanilla", label_owner="site-a")
    grads, start = {}, None
    for name, c in (("plain", plain_cfg), ("iso", cfg)):
        parties, label = build(c, label_class=SplitNNLabelParty)
        label.sites = list(parties)
        label.split_begin(False)
        # a defended head starts from private weights (issue 36): give both the same start to compare
        if start is None:
            start = {k: v.clone() for k, v in label.state["classifier"].state_dict().items()}
        else:
            label.state["classifier"].load_state_dict(start)
        rows = np.arange(16)
        reps = {s: p.split_forward("aligned", rows) for s, p in parties.items()}
        grads[name], _ = label.split_step(rows, reps)
    assert np.array_equal(grads["iso"]["site-a"], grads["plain"]["site-a"])  # the label owner's own
    noise = grads["iso"]["site-b"] - grads["plain"]["site-b"]
    assert noise.std() > 0.5 * iso_sigma(torch.as_tensor(grads["plain"]["site-b"]), 5.0)


def test_iso_pretrain_noises_only_what_the_active_party_sends():
    parties, _ = _pretrained()
    party = parties["site-a"]
    rows = np.arange(32)
    clean = party.cross_step(rows)
    party._cross_pending = None
    noisy = party.cross_step(rows, iso_strength=1.0)
    assert not np.allclose(clean, noisy)
    assert (noisy - clean).std() == pytest.approx(iso_sigma(torch.as_tensor(clean), 1.0), rel=0.2)
    # its own training continues from the clean forward
    pending = party._cross_pending[1].detach().numpy()
    np.testing.assert_allclose(pending, clean, atol=1e-6)
