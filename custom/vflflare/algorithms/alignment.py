"""Sample alignment: the rows every party has, in one canonical order, and the validation hold-out.

Until the PSI phase exists, parties send salted SHA-256 digests of their IDs; the coordinator
intersects digests and returns to each party only positions into its own table. The coordinator
learns the set sizes and, knowing the salt, could test guessed IDs -- PSI removes that.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


class AlignmentError(ValueError):
    """The parties' IDs do not give a usable aligned set."""


def hash_ids(ids: list[str], salt: str) -> list[str]:
    return [hashlib.sha256(f"{salt}\x00{i}".encode()).hexdigest()[:32] for i in ids]


@dataclass
class PartyRows:
    train: np.ndarray  # positions of the aligned labeled rows in the party's train table
    val: np.ndarray  # positions of the validation rows in the party's train table
    test: np.ndarray  # positions of the test rows in the party's test table


def _positions(digests: list[str], order: list[str]) -> np.ndarray:
    index = {d: i for i, d in enumerate(digests)}
    return np.asarray([index[d] for d in order], dtype=np.int64)


def align(
    train_digests: dict[str, list[str]],
    test_digests: dict[str, list[str]],
    num_classes: int,
    val_fraction: float,
    seed: int,
    label_party: str,
) -> dict[str, PartyRows]:
    """Intersect every party's digests (the label party's train digests are its labeled rows).

    The canonical order is the sorted digests, shuffled by the job seed, so it reveals nothing about
    any party's file order. The first ceil(val_fraction * n) aligned rows are the validation split.
    """
    parties = list(train_digests)
    common_train = set.intersection(*(set(d) for d in train_digests.values()))
    common_test = set.intersection(*(set(d) for d in test_digests.values()))
    sizes = ", ".join(f"{p}: {len(train_digests[p])}" for p in parties)
    if not common_train:
        raise AlignmentError(f"the parties share no training rows (train rows per party: {sizes})")
    if not common_test:
        raise AlignmentError("the parties share no test rows; every party's test file must hold the same IDs")
    rng = np.random.default_rng(seed)
    order = sorted(common_train)
    rng.shuffle(order)
    n_val = int(np.ceil(val_fraction * len(order))) if val_fraction > 0 else 0
    val, train = order[:n_val], order[n_val:]
    if len(train) < num_classes:
        raise AlignmentError(
            f"only {len(train)} aligned labeled rows for training ({len(order)} shared, {n_val} held out for "
            f"validation) but the task has {num_classes} classes; party '{label_party}' needs at least one "
            f"labeled row per class (train rows per party: {sizes})"
        )
    test = sorted(common_test)
    return {
        p: PartyRows(
            _positions(train_digests[p], train),
            _positions(train_digests[p], val),
            _positions(test_digests[p], test),
        )
        for p in parties
    }
