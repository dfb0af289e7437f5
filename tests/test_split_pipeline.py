"""batches_per_step: split NN with several batches per round trip (issue 29 item 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_parties import build

from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config

SITES = ["site-1", "site-2"]


@pytest.mark.parametrize("label_owner", ["server", "site-1"])
def test_fewer_round_trips_with_the_counts_the_protocol_implies(label_owner):
    settings = {"algorithm": "vanilla", "label_owner": label_owner, "split_epochs": 6, "split_patience": 6}
    one = run_inprocess(make_config(settings), SITES, None)
    three = run_inprocess(make_config(settings, batches_per_step=3), SITES, None)
    batches = math.ceil(one["rows"]["aligned_train"] / 32)
    assert one["step_latency"]["steps"] == 6 * batches
    assert three["step_latency"]["steps"] == 6 * math.ceil(batches / 3)
    # what split_nn_communications says, message for message: a label site gets one relay per round trip
    for result in (one, three):
        assert {
            s: {k: row[k] for k in ("uploads", "downloads")} for s, row in result["communication"]["per_site"].items()
        } == result["expected_communication"]
        assert result["metrics"]["test_auc"] >= 0.95, result["metrics"]


def test_a_group_s_gradients_are_taken_at_the_weights_its_forwards_ran_with():
    """Two batches forwarded at W, then their gradients: each parameter gradient is dL/dW at W (the later one
    stale by one update), and Adam applies them in order."""
    cfg = make_config(algorithm="fewshot", batches_per_step=2)
    parties, _ = build(cfg)
    site = parties["site-a"]
    rows = [np.arange(0, 8), np.arange(8, 16)]
    start = {k: v.clone() for k, v in site.encoder.state_dict().items()}
    grads = [np.random.default_rng(i).normal(size=(8, cfg.rep_dim)).astype(np.float32) for i in range(2)]

    reply = site.split({"rows": rows})
    assert isinstance(reply["h"], list) and [h.shape for h in reply["h"]] == [(8, cfg.rep_dim)] * 2
    site.split({"grad": grads})

    replica = build(cfg)[0]["site-a"]
    replica.encoder.load_state_dict(start)
    replica.encoder.train()
    params = list(replica.encoder.parameters())
    at_w = []
    for r, g in zip(rows, grads):
        out = replica.encode(replica.part("aligned", torch.as_tensor(r)))
        at_w.append(torch.autograd.grad(out, params, torch.as_tensor(g)))
    adam = torch.optim.Adam(params, lr=cfg.lr)
    for param_grads in at_w:
        for p, g in zip(params, param_grads):
            p.grad = g
        adam.step()
    for (name, ours), theirs in zip(site.encoder.state_dict().items(), replica.encoder.state_dict().values()):
        torch.testing.assert_close(ours, theirs, msg=name)
