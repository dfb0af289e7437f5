"""The representation-upload block: sites send f_k's output for parts of their rows, and the label
party trains its classifier f_c on them (one-shot Alg. 1 lines 2-4 and 22-27, SS-VFL-I)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vflflare.protocol.transport import Transport

# what the label party trains, selects and scores f_c on
FINAL_PARTS = ["aligned", "val", "test"]


def reps_of(replies: dict[str, dict], part: str) -> dict[str, np.ndarray]:
    return {site: reply[part] for site, reply in replies.items()}


def upload_representations(net: Transport, parts: list[str], phase: str = "representations") -> dict[str, dict]:
    """Every site's representations of `parts`, one upload per site."""
    with net.ledger.phase(phase):
        return net.exchange("represent", {s: {"parts": parts} for s in net.sites})


def train_classifier(net: Transport, label: Any, reps: dict[str, dict]) -> dict[str, float]:
    """f_c on the aligned representations, early stopped on validation, scored on test."""
    with net.ledger.phase("classifier"):
        return label.fit_classifier(reps)
