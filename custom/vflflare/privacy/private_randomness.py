"""Randomness only the defending party holds: every draw that protects data (randomized-response coins,
gradient noise, Marvell, ISO, representation and scoring noise, and a head initialisation a gradient
defense relies on) comes from here, never from the job seed, which every party holds.

The source is the operating system's entropy, unless the party sets a private seed in its own local
configuration, for benchmarks that must repeat: `private_seed` in its kit's `local/vflflare.json` or the
environment variable VFLFLARE_PRIVATE_SEED at that party. The seed never goes in the job and never leaves
the party; results record which kind of source was used, never its value.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

PRIVATE_SEED_ENV = "VFLFLARE_PRIVATE_SEED"
PRIVATE_SEED_KEY = "private_seed"  # in the party's local/vflflare.json

OS_ENTROPY = "os entropy"
LOCAL_SEED = "private seed (local configuration)"


def _stream_seed(secret: str, party: str, purpose: str) -> int:
    """63 bits of SHA-256 of the secret, the party's role and the purpose: a seed per stream, none of which
    can be told from another without the secret."""
    digest = hashlib.sha256(f"vflflare-private:{secret}:{party}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass
class PrivateRandomness:
    """One party's private source. `party` is its role in the job (the label party, or the k-th site), so the
    parties of a benchmark that share one private seed still draw independent streams."""

    party: str
    secret: str | None = None  # None: the OS's entropy
    _drawn: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def from_environment(cls, party: str, local_seed: str | None = None) -> PrivateRandomness:
        """The party's local configuration first (`local_seed`, read from its local/vflflare.json by the
        caller), then VFLFLARE_PRIVATE_SEED, then the OS."""
        secret = local_seed if local_seed not in (None, "") else os.environ.get(PRIVATE_SEED_ENV) or None
        return cls(party, None if secret is None else str(secret))

    @property
    def source(self) -> str:
        return OS_ENTROPY if self.secret is None else LOCAL_SEED

    def seed(self, purpose: str) -> int:
        self._drawn.add(purpose)
        if self.secret is None:
            return secrets.randbits(63)
        return _stream_seed(self.secret, self.party, purpose)

    def generator(self, purpose: str) -> torch.Generator:
        """A fresh generator for one purpose (a party keeps it in its state for the whole job)."""
        return torch.Generator().manual_seed(self.seed(purpose))

    @contextlib.contextmanager
    def init(self, purpose: str) -> Iterator[None]:
        """Build modules from this source without disturbing the caller's global torch RNG."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed(purpose))
            yield

    def record(self) -> dict[str, object]:
        """What a result may say of this source: its kind and the purposes it served, never the secret."""
        return {"source": self.source, "purposes": sorted(self._drawn)}


def collect_sources(report: dict, replies: dict, sites: list[str]) -> None:
    """The coordinator's side: the kind of private source each site said it uses (setup reply, sent only with
    a defense on) into the job's report under "private_randomness"."""
    found = {site: replies[site]["private_randomness"] for site in sites if "private_randomness" in replies[site]}
    if found:
        report["private_randomness"] = found
