"""The secure aggregation block, with CKKS: sites encrypt, the coordinator adds ciphertexts without
decrypting (it only holds the public server context), sites decrypt the sum. For the model-averaging
steps of FedHSSL and CFL; checked end to end by the `secure_sum` plug-in (algorithms/secure_sum.py).

One round of `secure_sum`:
1. `exchange(contribute_task)`: each site replies with its tensors; with `he: true` every float tensor
   leaves the site as a ciphertext (the job's EncryptTaskResult filter) and the coordinator's transport
   refuses any plaintext one.
2. The coordinator adds the replies under encryption (`ckks.add_payloads`, server context).
3. `exchange(result_task)`: the encrypted sum goes down; the site's DecryptTaskData filter decrypts it.
"""

from __future__ import annotations

from collections.abc import Mapping

from vflflare.privacy import ckks
from vflflare.protocol.payload import Payload
from vflflare.protocol.run_context import RunContext


def encrypted_sum(replies: Mapping[str, Payload], ctx: ckks.HEContext) -> Payload:
    """The sum of the sites' encrypted replies (same structure each), computed without decrypting."""
    sites = sorted(replies)
    return ckks.add_payloads([replies[s] for s in sites], ctx)


def secure_sum(
    ctx: RunContext,
    contribute_task: str,
    requests: Mapping[str, Payload],
    result_task: str,
    *,
    result_requests: Mapping[str, Payload] | None = None,
    phase: str = "secure_aggregation",
) -> dict[str, Payload]:
    """One secure aggregation round under ctx.he_context; returns each site's reply to `result_task`, whose
    payload is `result_requests[site]` plus the encrypted sum under "sum"."""
    net = ctx.net
    with net.ledger.phase(phase):
        replies = net.exchange(contribute_task, requests)
        total = encrypted_sum(replies, ctx.he_context)
        extra = result_requests or {}
        return net.exchange(result_task, {s: {**extra.get(s, {}), "sum": total} for s in requests})
