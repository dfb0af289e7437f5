"""Secure aggregation in-process: sites encrypt, the coordinator adds ciphertexts with the public
server context only, sites decrypt a sum that matches the plaintext sum within 1e-3."""

from collections.abc import Mapping

import numpy as np
import pytest

from vflflare import wire
from vflflare.algorithms import secure_sum as plugin
from vflflare.algorithms.blocks import secure_aggregation as sa
from vflflare.privacy import ckks
from vflflare.protocol.ledger import CommLedger
from vflflare.protocol.payload import Payload, tensor_kinds
from vflflare.registry import make_config
from vflflare.tracking import LogTracker


class HEInProcess:
    """Sites in this process; around each site the codec does what the job's HE filters do in NVFlare.
    The coordinator side keeps every message it receives, as bytes."""

    def __init__(self, sites: list[str], client: ckks.HEContext) -> None:
        self.sites, self.client = sites, client
        self.ledger = CommLedger()
        self.received: list[Payload] = []

    def exchange(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        replies = {}
        for site, payload in payloads.items():
            request = wire.dumps(payload)
            self.ledger.record(site, "down", payload, len(request))
            at_site = ckks.decrypt_payload(wire.loads(request), self.client)  # DecryptTaskData
            reply = wire.dumps(
                ckks.encrypt_payload(plugin.SecureSumCheck.setup.stateless_steps()[task](site, at_site), self.client)
            )  # EncryptTaskResult
            replies[site] = wire.loads(reply)
            self.ledger.record(site, "up", replies[site], len(reply))
            self.received.append(replies[site])
        return replies

    step = exchange


@pytest.fixture(scope="module")
def keys():
    server, client = ckks.make_contexts()
    return ckks.load_context(server, "server"), ckks.load_context(client, "client")


@pytest.mark.parametrize("n_sites", [2, 3])
def test_secure_sum_matches_plaintext_sum(keys, n_sites):
    server, client = keys
    sites = [f"site-{i + 1}" for i in range(n_sites)]
    net = HEInProcess(sites, client)
    cfg = make_config(algorithm="secure_sum", he=True, seed=3, shape=[50, 170])  # 8500 values
    flow = plugin.SecureSumCheck(cfg, LogTracker(), server)
    metrics = flow.run(net, None, {})
    results = {"communication": net.ledger.summary()}
    assert metrics["secure_sum_max_abs_error"] < 1e-3
    assert flow.expected_communications(sites, {}) == {s: {"uploads": 1, "downloads": 1} for s in sites}
    # the coordinator only ever held ciphertexts of the tensors (and the sites' error numbers)
    assert all(tensor_kinds(r)["plaintext"] == 0 for r in net.received)
    assert results["communication"]["tensor_kinds"]["up"]["plaintext"] == 0
    assert results["communication"]["tensor_kinds"]["down"] == {"plaintext": 0, "encrypted": n_sites}
    assert results["communication"]["total"]["uploads"] == n_sites  # contributions; error reports are control


def test_encrypted_sum_directly(keys):
    """The building block later algorithms use (FedHSSL / CFL weight averaging)."""
    server, client = keys
    rng = np.random.default_rng(0)
    weights = {
        s: {
            "w": rng.standard_normal((64, 80)).astype(np.float32),
            "b": rng.standard_normal(80).astype(np.float32),
            "n": 10,
        }
        for s in ("site-1", "site-2", "site-3")
    }
    replies = {s: ckks.encrypt_payload(w, client) for s, w in weights.items()}
    total = sa.encrypted_sum(replies, server)
    assert tensor_kinds(total) == {"plaintext": 0, "encrypted": 2}
    plain = ckks.decrypt_payload(total, client)
    assert np.abs(plain["w"] - sum(w["w"] for w in weights.values())).max() < 1e-3
    assert np.abs(plain["b"] - sum(w["b"] for w in weights.values())).max() < 1e-3
    assert plain["n"] == 30
    with pytest.raises(TypeError, match="plaintext"):
        sa.encrypted_sum(weights, server)  # the coordinator never adds plaintext tensors


def test_secure_sum_needs_he():
    with pytest.raises(ValueError, match="algorithm 'secure_sum': he must be true"):
        make_config(algorithm="secure_sum")
