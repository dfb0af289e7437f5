"""One job seed; every party derives its own from (seed, name) so runs repeat exactly."""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Iterator

import numpy as np
import torch


def derive_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


@contextlib.contextmanager
def seeded_init(seed: int) -> Iterator[None]:
    """Build modules under `seed` without disturbing the caller's global torch RNG, so a party's
    initial weights depend on its own seed only, not on what ran before in the process."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
