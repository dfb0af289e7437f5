"""Secure aggregation with CKKS: sites encrypt, the coordinator adds ciphertexts without decrypting (it
only holds the public server context), sites decrypt the sum. For the model-averaging steps of FedHSSL
and CFL, and tested now on a minimal flow (`algorithm: secure_sum`).

Round of `secure_sum`:
1. `exchange(contribute_task)`: each site replies with its tensors; with `he: true` every float tensor
   leaves the site as a ciphertext (the job's EncryptTaskResult filter) and the coordinator's transport
   refuses any plaintext one.
2. The coordinator adds the replies under encryption (`ckks.add_payloads`, server context).
3. `exchange(result_task)`: the encrypted sum goes down; the site's DecryptTaskData filter decrypts it.

`SecureSumCheck` is the test flow: every site contributes a pseudo-random tensor derived from
(seed, site), so each site can recompute the plaintext sum and report how far the decrypted one is
from it -- a number, not a tensor, so the coordinator learns nothing else.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from vflflare.algorithms.payload import Payload
from vflflare.algorithms.transport import Transport
from vflflare.config import VFLConfig
from vflflare.privacy import ckks
from vflflare.seeding import derive_seed

PREFIX = "secure_sum."
CONTRIBUTE = PREFIX + "contribute"
RESULT = PREFIX + "result"
SITE_TASKS = [CONTRIBUTE, RESULT]
DEFAULT_SHAPE = (64, 130)  # 8320 values: three CKKS chunks of 4096 slots


def encrypted_sum(replies: Mapping[str, Payload], ctx: ckks.HEContext) -> Payload:
    """The sum of the sites' encrypted replies (same structure each), computed without decrypting."""
    sites = sorted(replies)
    return ckks.add_payloads([replies[s] for s in sites], ctx)


def secure_sum(
    net: Transport,
    contribute_task: str,
    requests: Mapping[str, Payload],
    result_task: str,
    ctx: ckks.HEContext,
    result_requests: Mapping[str, Payload] | None = None,
    phase: str = "secure_aggregation",
) -> dict[str, Payload]:
    """One secure aggregation round; returns each site's reply to `result_task`, whose payload is
    `result_requests[site]` plus the encrypted sum under "sum"."""
    with net.ledger.phase(phase):
        replies = net.exchange(contribute_task, requests)
        total = encrypted_sum(replies, ctx)
        extra = result_requests or {}
        return net.exchange(result_task, {s: {**extra.get(s, {}), "sum": total} for s in requests})


# ------------------------------------------------------------------------------- test flow (sites)


def contribution(seed: int, site: str, shape: list[int] | tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(derive_seed(seed, f"secure-sum:{site}"))
    return rng.standard_normal(tuple(shape)).astype(np.float32)


def site_handle(site: str, task: str, payload: Payload) -> Payload:
    """A site's side of the test flow (the filters encrypt and decrypt around it)."""
    if task == CONTRIBUTE:
        return {"tensor": contribution(int(payload["seed"]), site, payload["shape"])}
    if task == RESULT:
        total = np.asarray(payload["sum"]["tensor"], dtype=np.float64)
        expected = sum(contribution(int(payload["seed"]), s, payload["shape"]).astype(np.float64) for s in payload["sites"])
        return {"max_abs_error": float(np.max(np.abs(total - expected))), "values": int(total.size)}
    raise ValueError(f"site '{site}': unknown secure aggregation task '{task}'")


# ------------------------------------------------------------------------------ test flow (server)


class SecureSumCheck:
    """`algorithm: secure_sum`: one secure aggregation round of pseudo-random tensors; the metric is the
    largest |decrypted sum - plaintext sum| any site saw (cfg.extra["secure_sum_shape"] sets the shape)."""

    def __init__(self, cfg: VFLConfig) -> None:
        if not cfg.he:
            raise ValueError("algorithm 'secure_sum' needs he: true (it checks aggregation under encryption)")
        self.cfg = cfg
        self.shape = [int(d) for d in cfg.extra.get("secure_sum_shape", DEFAULT_SHAPE)]

    def run(self, net: Transport, ctx: ckks.HEContext) -> dict[str, Any]:
        request = {"seed": self.cfg.seed, "shape": self.shape, "sites": list(net.sites)}
        requests = {s: request for s in net.sites}
        replies = secure_sum(net, CONTRIBUTE, requests, RESULT, ctx, result_requests=requests)
        errors = {s: float(r["max_abs_error"]) for s, r in replies.items()}
        return {
            "algorithm": "secure_sum",
            "seed": self.cfg.seed,
            "sites": list(net.sites),
            "label_owner": self.cfg.label_owner,
            "metrics": {"secure_sum_max_abs_error": max(errors.values())},
            "training": {"per_site_max_abs_error": errors, "values": int(np.prod(self.shape))},
            "communication": net.ledger.summary(),
            "phases": net.ledger.phases,
            "wall_s": net.ledger.wall_s(),
            "config": self.cfg.to_dict(),
        }
