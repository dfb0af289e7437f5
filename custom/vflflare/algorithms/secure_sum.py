"""`secure_sum`: one secure aggregation round of pseudo-random tensors, the end-to-end check of the
secure aggregation block under NVFlare's HE filters. Every site contributes a tensor derived from
(seed, site), so each site can recompute the plaintext sum and report how far the decrypted one is
from it -- a number, not a tensor, so the coordinator learns nothing else. No site data is used."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vflflare.algorithms.blocks.secure_aggregation import secure_sum
from vflflare.algorithms.plugin import Algorithm
from vflflare.config import JobConfig
from vflflare.privacy.he_keys import SHARED_KEY_TASKS
from vflflare.protocol.party_setup import Stateless
from vflflare.protocol.payload import Payload
from vflflare.protocol.transport import Transport
from vflflare.registry import register
from vflflare.seeding import derive_seed

CONTRIBUTE, RESULT = "secure_sum.contribute", "secure_sum.result"
SHARED_KEY_TASKS.add(CONTRIBUTE)  # the kit's shared key: every site decrypts the sum


@dataclass
class SecureSumConfig(JobConfig):
    shape: list[int] = field(default_factory=lambda: [64, 130])  # 8320 values: three CKKS chunks of 4096 slots
    he_with_server_labels = True  # the coordinator only adds ciphertexts
    privacy_channels = frozenset()

    def validate(self) -> None:
        super().validate()
        self.check(self.he, "he", "must be true: secure_sum checks aggregation under encryption")


def contribution(seed: int, site: str, shape: list[int]) -> np.ndarray:
    rng = np.random.default_rng(derive_seed(seed, f"secure-sum:{site}"))
    return rng.standard_normal(tuple(shape)).astype(np.float32)


def contribute(site: str, payload: Payload) -> Payload:
    return {"tensor": contribution(int(payload["seed"]), site, payload["shape"])}


def check_result(site: str, payload: Payload) -> Payload:
    total = np.asarray(payload["sum"]["tensor"], dtype=np.float64)
    expected = sum(contribution(int(payload["seed"]), s, payload["shape"]).astype(np.float64) for s in payload["sites"])
    return {"max_abs_error": float(np.max(np.abs(total - expected))), "values": int(total.size)}


@register
class SecureSumCheck(Algorithm):
    name = "secure_sum"
    Config = SecureSumConfig
    phases = ("secure_aggregation",)
    setup = Stateless(steps={CONTRIBUTE: contribute, RESULT: check_result})

    def run(self, net: Transport, label: Any, rows: dict[str, int]) -> dict[str, float]:
        request = {"seed": self.cfg.seed, "shape": self.cfg.shape, "sites": list(net.sites)}
        requests = {s: request for s in net.sites}
        replies = secure_sum(self.context(net, label), CONTRIBUTE, requests, RESULT, result_requests=requests)
        errors = {s: float(r["max_abs_error"]) for s, r in replies.items()}
        self.info.update(per_site_max_abs_error=errors, values=int(np.prod(self.cfg.shape)))
        return {"secure_sum_max_abs_error": max(errors.values())}

    def expected_communications(self, sites: list[str], rows: dict[str, int]) -> dict[str, dict[str, int]]:
        return self.per_site(sites, feature=(1, 1), label_extra=(0, 0))  # contributions up, the sum down
