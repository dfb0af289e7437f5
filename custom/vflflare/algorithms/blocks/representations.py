"""The representation-upload block: sites send f_k's output for parts of their rows, and the label
party trains its classifier f_c on them (one-shot Alg. 1 lines 2-4 and 22-27, SS-VFL-I)."""

from __future__ import annotations

import numpy as np

from vflflare.protocol.going_alone import keep_comparison
from vflflare.protocol.run_context import RunContext

# what the label party trains, selects and scores f_c on
FINAL_PARTS = ["aligned", "val", "test"]


def reps_of(replies: dict[str, dict], part: str) -> dict[str, np.ndarray]:
    return {site: reply[part] for site, reply in replies.items()}


def upload_representations(ctx: RunContext, parts: list[str], *, phase: str = "representations") -> dict[str, dict]:
    """Every site's representations of `parts`, one upload per site."""
    net = ctx.net
    with net.ledger.phase(phase):
        return net.exchange("represent", {s: {"parts": parts} for s in net.sites})


def train_classifier(ctx: RunContext, reps: dict[str, dict]) -> dict[str, float]:
    """f_c on the aligned representations, early stopped on validation, scored on test (and compared with
    going alone)."""
    with ctx.net.ledger.phase("classifier"):
        return keep_comparison(ctx.info, ctx.label.fit_classifier(reps))
