"""Issue 36, item 5: a defense a user can set without an undefended run first. With gradient_normalize every
gradient row is scaled to exactly gradient_clip, so C is a scale (the sites train with Adam) and
gradient_clip: 1 works on any table."""

from __future__ import annotations

import pytest
import torch

from vflflare.config import ConfigError
from vflflare.privacy.defenses import defend_gradients, normalize_rows
from vflflare.protocol import label_party
from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

SITES = ["site-1", "site-2"]


def test_normalized_rows_all_have_the_clipping_norm_and_keep_their_direction():
    grads = torch.tensor([[3.0, 4.0], [0.03, 0.04], [0.0, 0.0], [-1.0, 0.0]])
    out = normalize_rows(grads, 2.0)
    assert torch.allclose(out.norm(dim=1), torch.tensor([2.0, 2.0, 0.0, 2.0]))
    assert torch.allclose(out[0], out[1])  # same direction, so the same row after normalising
    off = defend_gradients(grads, 2.0, 0.0, 1.0, torch.Generator(), normalize=True)
    assert torch.equal(off, out)


def test_gradient_normalize_at_c_1_trains_on_a_table_whose_gradients_are_far_smaller(monkeypatch):
    sent = []
    original = label_party.defend_gradients
    monkeypatch.setattr(
        label_party, "defend_gradients", lambda g, *a, **k: sent.append((g, original(g, *a, **k))) or sent[-1][1]
    )
    plain = run_inprocess(make_config({"algorithm": "vanilla", "split_epochs": 5, "split_patience": 5}), SITES, None)
    result = run_inprocess(
        make_config(
            {
                "algorithm": "vanilla",
                "split_epochs": 5,
                "split_patience": 5,
                "gradient_clip": 1.0,
                "gradient_normalize": True,
            }
        ),
        SITES,
        None,
    )
    raw, received = sent[0]
    assert raw.norm(dim=1).max() < 0.1  # a mean loss over a batch: every row far inside C = 1
    assert torch.allclose(received.norm(dim=1), torch.ones(len(received)))
    assert result["defenses"] == {"gradient_clip": 1.0, "gradient_normalize": True}
    assert result["metrics"]["test_auc"] > plain["metrics"]["test_auc"] - 0.02


def test_gradient_normalize_needs_a_norm():
    with pytest.raises(ConfigError, match="gradient_normalize needs gradient_clip"):
        make_config({"algorithm": "vanilla", "gradient_normalize": True})
