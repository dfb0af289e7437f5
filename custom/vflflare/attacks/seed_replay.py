"""Seed replay: a regression attack on defenses drawn from the public job seed. Every party holds the seed
and the code, so it can re-run the defending party's generator and subtract the very noise it added, or
read off which randomized-response coins came up. It recovers everything while a defense derives its
draws from (seed, purpose) as the code once did; once the draws come from randomness only the defending
party holds (DESIGN.md, Conventions), the replayed draws are unrelated to the real ones and this attack
must score no better than the plain ones. Each replay mirrors the old derivation:

- gradient noise: LabelParty.to_sites' generator seed(seed(job seed, "label"), "gradient-defense:batches"),
  one `defend_gradients` call per site without labels in the job's site order, per message (one-shot: one
  message; split NN: one per batch), each clip then N(0, (noise x clip)^2) of the batch's shape;
- randomized response: seed(seed(job seed, "label"), "label-dp"), `randomized_response`'s keep coins (rand)
  then shifts (randint) over the aligned labeled rows in the canonical order;
- representation noise: site k's seed(seed(job seed, f"site-{k}"), "rep-noise"), one draw of the upload's
  shape per `FeatureParty.to_upload`, in the order the site uploaded (its scale, strength x the clean RMS,
  is fitted by least squares, the clean RMS being unknown to the label party)."""

from __future__ import annotations

import math

import numpy as np
import torch

from vflflare.attacks.observed import GradientRound
from vflflare.protocol.recording import Message
from vflflare.seeding import derive_seed

CHANNEL = "gradients"  # its label attacks; the representation replay serves feature reconstruction

# the site steps whose replies are noised uploads, and where each names the parts it uploads in order
_UPLOAD_PARTS = {"represent": "parts", "oneshot_update": "represent", "fewshot_update": "represent"}


def label_stream(seed: int, purpose: str) -> torch.Generator:
    """The label party's public generator for `purpose`, as the old code seeded it."""
    return torch.Generator().manual_seed(derive_seed(derive_seed(seed, "label"), purpose))


def gradient_replay_blocker(
    clip: float, noise: float, keep: float, marvell: float, iso: float, batches_per_step: int
) -> str | None:
    """Why the gradient noise cannot be replayed (None: it can)."""
    if clip <= 0 or noise <= 0:
        return "no gradient noise to replay"
    if marvell > 0 or keep < 1 or iso > 0:
        return "not replayable: Marvell, sparsification or ISO act on the noised gradients"
    if batches_per_step > 1:
        return "not attempted: with batches_per_step > 1 the draws of a message's batches interleave across sites"
    return None


def calls_of(rounds: list[GradientRound]) -> list[int]:
    """The rows of each defend_gradients call in received order: one per message (rows sharing a message id
    are consecutive within a round)."""
    sizes = []
    for r in rounds:
        _, first, counts = np.unique(r.message, return_index=True, return_counts=True)
        sizes += counts[np.argsort(first)].tolist()
    return sizes


def replay_gradient_noise(
    seed: int, call_rows: list[int], width: int, site_index: int, defended_sites: int, std: float
) -> np.ndarray:
    """The noise site number `site_index` (among the `defended_sites` sites without labels, in the job's
    order) got in each call, concatenated in received order [sum(call_rows), width]."""
    generator = label_stream(seed, "gradient-defense:batches")
    out = []
    for rows in call_rows:
        for j in range(defended_sites):
            draw = torch.randn((rows, width), generator=generator, dtype=torch.float32)
            if j == site_index:
                out.append(draw.numpy())
    return std * np.concatenate(out).astype(np.float64) if out else np.zeros((0, width))


def cleaned_rounds(rounds: list[GradientRound], noise: np.ndarray) -> list[GradientRound]:
    """The rounds with the replayed noise removed (rounds hold the received rows in received order)."""
    cleaned, start = [], 0
    for r in rounds:
        flat = r.grads.reshape(len(r.grads), -1).astype(np.float64)
        cleaned.append(GradientRound(r.positions, flat - noise[start : start + len(flat)], r.message))
        start += len(flat)
    return cleaned


def replay_response_coins(seed: int, n_rows: int, num_classes: int, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """(kept, shift) per aligned labeled row, as randomized_response drew them from the public stream."""
    generator = label_stream(seed, "label-dp")
    keep_probability = 1.0 / (1.0 + (num_classes - 1) * math.exp(-epsilon))
    kept = torch.rand((n_rows,), generator=generator) < keep_probability
    shift = torch.randint(1, num_classes, (n_rows,), generator=generator)
    return kept.numpy(), shift.numpy().astype(np.int64)


def invert_response(noised: np.ndarray, kept: np.ndarray, shift: np.ndarray, num_classes: int) -> np.ndarray:
    """The true labels from the noised ones and the replayed coins: a flipped label was moved by `shift`."""
    noised = np.asarray(noised, dtype=np.int64)
    return np.where(kept, noised, (noised - shift) % num_classes)


def noised_uploads(messages: list[Message], site: str) -> tuple[list[tuple[str, np.ndarray]], str | None]:
    """Every noised upload of `site`, (task:part, array), in the order it drew its noise; and why that order
    is unknown, if it is."""
    uploads = []
    for message in messages:
        if message.site != site:
            continue
        if message.task in _UPLOAD_PARTS:
            for part in message.request.get(_UPLOAD_PARTS[message.task], []):
                array = np.asarray(message.reply[part])
                if array.size:  # an empty part draws nothing
                    uploads.append((f"{message.task}:{part}", array))
        elif message.task == "split" and "h" in message.reply:
            batches = message.reply["h"] if isinstance(message.reply["h"], list) else [message.reply["h"]]
            uploads += [("split:h", np.asarray(batch)) for batch in batches]
        elif any(np.ndim(v) == 2 and np.asarray(v).dtype.kind == "f" for v in message.reply.values()):
            return uploads, (
                f"not attempted: the site uploads through '{message.task}', whose noise draws are not replayed"
            )
    return uploads, None


def replay_representation_noise(seed: int, position: int, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """The unit-variance noise of each upload, from site number position+1's public stream."""
    generator = torch.Generator().manual_seed(derive_seed(derive_seed(seed, f"site-{position + 1}"), "rep-noise"))
    return [torch.randn(shape, generator=generator, dtype=torch.float32).numpy() for shape in shapes]


def remove_representation_noise(received: np.ndarray, unit_noise: np.ndarray) -> np.ndarray:
    """received - a x unit_noise with a fitted by least squares (the clean representations are nearly
    uncorrelated with the noise, so a is the strength x clean RMS up to O(1/sqrt(size)))."""
    received = np.asarray(received, dtype=np.float64)
    unit_noise = np.asarray(unit_noise, dtype=np.float64)
    scale = float((received * unit_noise).sum() / max(float((unit_noise**2).sum()), 1e-12))
    return received - scale * unit_noise
