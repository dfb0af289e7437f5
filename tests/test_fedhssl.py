"""FedHSSL (He et al., Alg. 1): which parameters each step trains, PMA equal to the plain average (and
under CKKS within 1e-3), every variant as a config of one plug-in, and exact communication counts."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
import torch
from test_parties import build

from vflflare import wire
from vflflare.algorithms.blocks.cross_party_ssl import targets_for
from vflflare.algorithms.blocks.partial_aggregation import average, partial_model_aggregation
from vflflare.algorithms.fedhssl import VARIANTS, HybridSSLSite
from vflflare.algorithms.vanilla import SplitNNLabelParty
from vflflare.config import ConfigError
from vflflare.privacy import ckks
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.ledger import CommLedger
from vflflare.protocol.payload import Payload, tensor_kinds
from vflflare.protocol.run_context import RunContext
from vflflare.registry import make_config

SITES = ["site-1", "site-2"]


def small(**overrides):
    return make_config(
        algorithm="fedhssl", projector=[64, 64, 64], predictor_hidden=16, pretrain_batch_size=32, **overrides
    )


class PartiesNet:
    """The coordinator's two calls over parties in this process, each message through the wire codec. With
    a client context, replies leave a site encrypted and requests arrive decrypted, as the HE filters do."""

    def __init__(self, parties: dict, client: ckks.HEContext | None = None) -> None:
        self.parties, self.sites, self.client = parties, list(parties), client
        self.ledger = CommLedger()
        self.received: list[Payload] = []

    def exchange(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        replies = {}
        for site, payload in payloads.items():
            request = wire.loads(wire.dumps(payload))
            self.ledger.record(site, "down", request, 0)
            if self.client is not None:
                request = ckks.decrypt_payload(request, self.client)
            reply = getattr(self.parties[site], task)(request)
            if self.client is not None:
                reply = ckks.encrypt_payload(reply, self.client)
            replies[site] = wire.loads(wire.dumps(reply))
            self.ledger.record(site, "up", replies[site], 0)
            self.received.append(replies[site])
        return replies

    step = exchange


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def changed(before: dict, module: torch.nn.Module) -> set[str]:
    return {k for k, v in module.state_dict().items() if not torch.equal(before[k], v)}


def test_guided_local_ssl_trains_the_local_tower_only():
    parties, _ = build(small(), site_class=HybridSSLSite, label_class=SplitNNLabelParty)
    party = parties["site-a"]
    cross, local = snapshot(party.state["cross_head"]), snapshot(party.encoder.local)
    cross_encoder = snapshot(party.encoder.cross)
    reply = party.guided_local_ssl({"iteration": 0})
    assert reply["rows"] == len(party.rows_of("aligned")) + len(party.rows_of("unaligned"))
    assert changed(local, party.encoder.local)  # f_l learnt
    assert not changed(cross_encoder, party.encoder.cross) and not changed(cross, party.state["cross_head"])
    # and learnt Eq. 6: a second epoch lowers the loss (-0.06 -> -0.21 here); a finite loss alone is guaranteed
    # by finite_loss, which raises otherwise
    assert party.guided_local_ssl({"iteration": 1})["loss"] < reply["loss"] - 0.05


def test_cross_party_step_trains_the_cross_tower_only_and_never_sends_a_gradient():
    parties, _ = build(small(), site_class=HybridSSLSite, label_class=SplitNNLabelParty)
    local = {s: snapshot(p.encoder.local) for s, p in parties.items()}
    cross = {s: snapshot(p.encoder.cross) for s, p in parties.items()}
    rows = np.arange(32)
    z = {s: p.cross_ssl({"rows": rows})["z"] for s, p in parties.items()}
    assert all(v.shape == (32, 64) and v.dtype == np.float32 for v in z.values())
    pairs = targets_for(z, "site-a")
    assert list(pairs["site-a"]["targets"]) == ["site-b"] and list(pairs["site-b"]["targets"]) == ["site-a"]
    replies = {s: p.cross_ssl(pairs[s]) for s, p in parties.items()}
    assert set(replies["site-a"]) == {"loss"}  # a number back, nothing to differentiate
    for s, p in parties.items():
        assert changed(cross[s], p.encoder.cross) and not changed(local[s], p.encoder.local)


def test_active_party_gets_every_passive_partys_representations():
    z = {s: np.full((2, 3), i, dtype=np.float32) for i, s in enumerate(["a", "b", "c", "d"])}
    pairs = targets_for(z, "c")
    assert sorted(pairs["c"]["targets"]) == ["a", "b", "d"]
    assert all(list(pairs[s]["targets"]) == ["c"] for s in "abd")
    assert (pairs["a"]["targets"]["c"] == 2).all()


def test_pma_loads_the_plain_average_of_the_shared_part_only():
    parties, _ = build(small(), site_class=HybridSSLSite, label_class=SplitNNLabelParty)
    for party in parties.values():
        party.guided_local_ssl({"iteration": 0})  # the two sites now hold different weights
    shared = {s: p.shared_weights() for s, p in parties.items()}
    assert set(shared["site-a"]) == set(shared["site-b"])
    assert any(k.startswith("top.") for k in shared["site-a"]) and any(k.startswith("head.") for k in shared["site-a"])
    bottoms = {s: snapshot(p.encoder.local.mlp[0]) for s, p in parties.items()}
    cross = {s: snapshot(p.encoder.cross) for s, p in parties.items()}
    net = PartiesNet(parties)
    partial_model_aggregation(RunContext(net))
    for s, party in parties.items():
        after = party.shared_weights()
        for name, value in after.items():
            expected = (shared["site-a"][name].astype(np.float64) + shared["site-b"][name]) / 2
            np.testing.assert_allclose(value, expected, rtol=0, atol=1e-6)
        assert not changed(bottoms[s], party.encoder.local.mlp[0])  # f_lb stays the party's own
        assert not changed(cross[s], party.encoder.cross)
    counts = net.ledger.summary()["per_site"]
    assert all(counts[s]["uploads"] == 1 and counts[s]["downloads"] == 1 for s in parties)


def test_pma_refuses_local_tops_of_different_shapes():
    with pytest.raises(ValueError, match=r"PMA: w is \(3,\) at b but \(2,\) at a"):
        average({"a": {"w": np.zeros(2)}, "b": {"w": np.zeros(3)}})


def test_pma_under_ckks_is_the_average_within_1e_3_and_the_coordinator_sees_only_ciphertexts():
    server_bytes, client_bytes = ckks.make_contexts()
    server, client = ckks.load_context(server_bytes, "server"), ckks.load_context(client_bytes, "client")
    parties, _ = build(small(), site_class=HybridSSLSite, label_class=SplitNNLabelParty)
    for party in parties.values():
        party.guided_local_ssl({"iteration": 0})
    shared = {s: p.shared_weights() for s, p in parties.items()}
    net = PartiesNet(parties, client)
    partial_model_aggregation(RunContext(net, he_context=server))
    for party in parties.values():
        for name, value in party.shared_weights().items():
            expected = (shared["site-a"][name].astype(np.float64) + shared["site-b"][name]) / 2
            assert np.abs(value - expected).max() < 1e-3, name
    assert all(tensor_kinds(reply)["plaintext"] == 0 for reply in net.received)


def test_every_variant_is_a_config_of_the_one_plugin():
    for variant in VARIANTS:
        cfg = make_config(algorithm="fedhssl", variant=variant)
        assert cfg.representation_width == cfg.rep_dim * len(cfg.towers)
    assert make_config(algorithm="fedhssl", variant="fedhssl").towers == ("cross", "local")
    assert make_config(algorithm="fedhssl", variant="fedhssl", finetune_towers="local").towers == ("local",)  # FedHSSL*
    assert make_config(algorithm="fedhssl", variant="fedlocalssl").pretraining == ("local",)
    with pytest.raises(ConfigError, match="algorithm 'fedhssl': variant must be one of"):
        make_config(algorithm="fedhssl", variant="fedxssl")
    with pytest.raises(ConfigError, match="algorithm 'fedhssl': ssl_method must be one of"):
        make_config(algorithm="fedhssl", ssl_method="simclr")


@pytest.mark.parametrize("ssl_method", ["simsiam", "byol", "moco"])
def test_one_global_iteration_exact_communications(ssl_method):
    cfg = small(ssl_method=ssl_method, global_iterations=1, split_epochs=1, labeled_fraction=0.5, finetune_lrs=[0.01])
    results = run_inprocess(cfg, SITES, None)
    rows = results["rows"]
    assert rows["aligned_unlabeled"] > 0  # the rows labeled_fraction leaves out still pretrain f_c
    cross_rows = rows["aligned_train"] + rows["aligned_unlabeled"]
    batches = cross_rows // 32
    phase = results["communication"]["per_phase_site"]
    split_batches = -(-rows["aligned_train"] // 32)
    for site in SITES:
        assert phase["cross_ssl"][site] == {**phase["cross_ssl"][site], "uploads": batches, "downloads": batches}
        assert (phase["local_ssl"][site]["uploads"], phase["local_ssl"][site]["downloads"]) == (0, 0)
        assert (phase["pma"][site]["uploads"], phase["pma"][site]["downloads"]) == (1, 1)
        # one epoch: a forward upload per batch and the validation upload; a gradient download per batch
        assert (phase["finetune"][site]["uploads"], phase["finetune"][site]["downloads"]) == (
            split_batches + 1,
            split_batches,
        )
    assert results["expected_communication"] == {
        s: {"uploads": batches + 1 + split_batches + 1 + 1, "downloads": batches + 1 + split_batches} for s in SITES
    }
    width = cfg.projector_widths[-1]
    assert phase["cross_ssl"]["site-1"]["payload_bytes"] == 2 * batches * 32 * width * 4  # z_c up, z_c down
    assert results["metrics"]["test_auc"] > 0.8


def test_label_site_is_the_active_party_and_counts_hold():
    cfg = small(global_iterations=1, split_epochs=1, label_owner="site-2", variant="fedgssl")
    results = run_inprocess(cfg, SITES, None)
    assert results["expected_communication"] == {
        s: {"uploads": c["uploads"], "downloads": c["downloads"]}
        for s, c in results["communication"]["per_site"].items()
    }
    assert "pma" not in results["communication"]["per_phase"]


def test_fedsplitnn_is_split_nn_with_no_pretraining():
    results = run_inprocess(small(variant="fedsplitnn", split_epochs=3), SITES, None)
    assert set(results["communication"]["per_phase"]) == {"setup", "finetune", "evaluation"}
    assert results["metrics"]["test_auc"] > 0.9


def test_four_parties_with_the_labels_at_a_site():
    cfg = small(global_iterations=2, split_epochs=3, label_owner="site-3", labeled_fraction=0.5)
    sites = ["site-1", "site-2", "site-3", "site-4"]
    results = run_inprocess(cfg, sites, None)
    assert results["metrics"]["test_auc"] > 0.9
    counts = results["communication"]["per_site"]
    assert results["expected_communication"] == {
        s: {"uploads": c["uploads"], "downloads": c["downloads"]} for s, c in counts.items()
    }
    cross = results["communication"]["per_phase_site"]["cross_ssl"]
    # per batch the active party sends one z_c and receives the three passive parties'; a passive one, one and one
    assert cross["site-3"]["payload_bytes"] == 2 * cross["site-1"]["payload_bytes"]
    assert all(cross[s]["uploads"] == cross["site-3"]["uploads"] for s in sites)


def test_finetuning_keeps_the_learning_rate_best_on_validation():
    results = run_inprocess(small(global_iterations=1, split_epochs=2, split_patience=2), SITES, None)
    training = results["training"]
    scores = {float(lr): v for lr, v in training["finetune_val"].items()}
    assert list(scores) == [0.005, 0.01, 0.03]
    assert training["finetune_lr"] == max(scores, key=scores.get)
    assert results["metrics"]["val_auc"] == scores[training["finetune_lr"]]  # the kept model is the selected one
    runs = training["finetune_epochs"]
    assert len(runs) == (3 if training["finetune_lr"] == 0.03 else 4)
    batches = -(-results["rows"]["aligned_train"] // 32)
    finetune = results["communication"]["per_phase_site"]["finetune"]["site-1"]
    assert (finetune["uploads"], finetune["downloads"]) == (
        sum(e * (batches + 1) for e in runs),
        sum(e * batches for e in runs),
    )
    assert (
        results["expected_communication"]["site-1"]["uploads"]
        == results["communication"]["per_site"]["site-1"]["uploads"]
    )
