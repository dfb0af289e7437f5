"""Cross-party SSL (FedHSSL step 1, He et al., Alg. 1 lines 3-14, Eq. 5) over the per-batch channel.

The parties' views of one aligned row are a positive pair. Per mini-batch of aligned rows, every party
sends z_c = f_c(x) (its cross-party projection); the active party gets the K-1 passive parties' z_c,
each passive party the active party's, and each trains f_c and h_c on Eq. 5 against what it got. Only
representations travel, never a gradient: the exchange is the stop-gradient.

Like split-NN's loop, each round trip carries the targets of the previous batch and the rows of the
next one, so an epoch of T batches costs T uploads and T downloads per site (T + 1 round trips).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vflflare.privacy.he_keys import BROADCAST_TASKS
from vflflare.protocol.run_context import RunContext
from vflflare.protocol.transport import Transport

TASK = "cross_ssl"
BROADCAST_TASKS.add(TASK)  # with he: the active (label) site encrypts its z_c for every passive site


def full_batches(n_rows: int, batch_size: int) -> int:
    """Batches per epoch: full batches only (a trailing batch of a few rows would upset the projector's
    BatchNorm and weigh as much as a full one), or one batch of every row when there are fewer."""
    if n_rows < 2:
        raise ValueError(f"cross-party SSL needs at least 2 aligned training rows, got {n_rows}")
    return max(1, n_rows // batch_size)


def targets_for(z: dict[str, np.ndarray], active: str) -> dict[str, dict[str, np.ndarray]]:
    """Eq. 5's pairing: the active party gets every passive party's z_c, a passive party the active one's."""
    return {
        site: {"targets": {j: z[j] for j in z if j != active} if site == active else {active: z[active]}} for site in z
    }


def cross_party_epoch(
    net: Transport, active: str, order: np.ndarray, batch_size: int, iso_strength: float = 0.0
) -> dict[str, float]:
    """One epoch over the aligned rows in `order` (positions in the sites' cross-party rows); returns each
    site's mean Eq. 5 loss. iso_strength > 0: the active party sends its z_c with ISO noise (lambda_p)."""
    defense = {active: {"iso": iso_strength}} if iso_strength > 0 else {}
    pending: dict[str, dict] = {}
    losses: dict[str, list[float]] = {s: [] for s in net.sites}
    for b in range(full_batches(len(order), batch_size)):
        rows = order[b * batch_size : (b + 1) * batch_size] if len(order) >= batch_size else order
        with net.ledger.timed_step():
            replies = net.step(TASK, {s: {"rows": rows, **pending.get(s, {}), **defense.get(s, {})} for s in net.sites})
        for site, reply in replies.items():
            if "loss" in reply:
                losses[site].append(float(reply["loss"]))
        pending = targets_for({s: reply["z"] for s, reply in replies.items()}, active)
    for site, reply in net.step(TASK, pending).items():
        losses[site].append(float(reply["loss"]))
    return {site: float(np.mean(values)) for site, values in losses.items()}


def cross_party_ssl(
    ctx: RunContext,
    active: str,
    n_rows: int,
    *,
    batch_size: int,
    rng: np.random.Generator,
    iteration: int,
    iso_strength: float = 0.0,
) -> None:
    net, tracker = ctx.net, ctx.tracker
    if active not in net.sites:
        raise ValueError(f"cross-party SSL: the active party '{active}' is not one of the sites {net.sites}")
    with net.ledger.phase("cross_ssl"):
        losses = cross_party_epoch(net, active, rng.permutation(n_rows), batch_size, iso_strength)
    for site, loss in losses.items():
        tracker.scalar(f"cross_ssl/loss/{site}", loss, iteration)
    tracker.info(
        f"cross-party SSL, global iteration {iteration + 1}: loss "
        + ", ".join(f"{s} {v:.4f}" for s, v in losses.items())
    )


def cross_party_communications(n_rows: int, batch_size: int) -> tuple[int, int]:
    """(uploads, downloads) of one epoch at every site."""
    batches = full_batches(n_rows, batch_size)
    return batches, batches


class CrossPartySite:
    """Site half, mixed into a FeatureParty that provides `cross_step(rows, iso)` (forward, keeps the graph,
    returns z_c with ISO noise of that strength) and `cross_update(targets)` (Eq. 5 loss on the kept forward,
    optimiser steps, returns the loss)."""

    steps = (TASK,)

    def cross_ssl(self, payload: dict[str, Any]) -> dict[str, Any]:
        reply: dict[str, Any] = {}
        if "targets" in payload:
            reply["loss"] = self.cross_update(payload["targets"])
        if "rows" in payload:
            reply["z"] = self.cross_step(np.asarray(payload["rows"], dtype=np.int64), float(payload.get("iso", 0.0)))
        return reply
