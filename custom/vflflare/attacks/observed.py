"""What each party receives in a run, recorded at the transport: the attacks see exactly these messages
(and the attacker's own state), never another party's hidden state.

A site receives the requests the coordinator sends it (per-row gradients, pseudo-label probabilities); the
label party receives every site's replies (representations), wherever it runs: at the coordinator, or at a
label-owning site to which the coordinator relays them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vflflare.protocol.recording import Message


@dataclass
class GradientRound:
    """Per-row gradients a site received in one pass over the rows (a split-NN epoch, one-shot's single
    download): positions within the aligned rows, and one message index per row (the batch it came in)."""

    positions: np.ndarray
    grads: np.ndarray
    message: np.ndarray


def received_gradients(messages: list[Message], site: str) -> list[GradientRound]:
    """Every per-row gradient `site` received, in rounds: one-shot's partial gradients (one round) and the
    split-NN gradients, each paired with the batch rows of the request before it; a round ends when a row
    comes again."""
    rounds: list[GradientRound] = []
    current: list[tuple[np.ndarray, np.ndarray, int]] = []
    seen: set[int] = set()
    last_rows: np.ndarray | None = None

    def close() -> None:
        nonlocal current, seen
        if current:
            rounds.append(
                GradientRound(
                    np.concatenate([p for p, _, _ in current]),
                    np.concatenate([g for _, g, _ in current]),
                    np.concatenate([np.full(len(p), i) for p, _, i in current]),
                )
            )
        current, seen = [], set()

    for index, message in enumerate(m for m in messages if m.site == site):
        request = message.request
        if message.task == "oneshot_update":
            grads = np.asarray(request["grads"], dtype=np.float32)
            rounds.append(GradientRound(np.arange(len(grads)), grads, np.zeros(len(grads), dtype=np.int64)))
        elif message.task == "split":
            if "grad" in request and last_rows is not None:
                if seen & set(last_rows.tolist()):
                    close()
                current.append((last_rows, np.asarray(request["grad"], dtype=np.float32), index))
                seen |= set(last_rows.tolist())
            aligned = request.get("part", "aligned") == "aligned"
            last_rows = np.asarray(request["rows"], dtype=np.int64) if "rows" in request and aligned else None
    close()
    return rounds


def received_probabilities(messages: list[Message], site: str) -> np.ndarray | None:
    """Few-shot's pseudo-label probabilities p^ of the site's unaligned rows (Alg. 2), if it got them."""
    for message in messages:
        if message.site == site and message.task == "fewshot_update":
            return np.asarray(message.request["probs"], dtype=np.float32)
    return None


def uploaded_representations(messages: list[Message], site: str, part: str) -> np.ndarray | None:
    """The last representations of `part` the site uploaded: what the label party holds at the end."""
    found = None
    for message in messages:
        if message.site == site and part in message.reply and np.ndim(message.reply[part]) == 2:
            found = np.asarray(message.reply[part], dtype=np.float32)
    return found
