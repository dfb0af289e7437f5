"""Two-party ECDH-PSI in one exchange, on OpenMined PSI's elliptic-curve commutative cipher (P-256),
spread over a site's cores. No NVFlare import: flare/psi.py runs it as NVFlare's PSI task handler.

The protocol (Meadows 1986; Huberman-Franklin-Hogg 1999; SecretFlow's ECDH-PSI is the same): party A has
secret key a, party B secret key b, H hashes an item onto the curve.

1. offer: each party sends its items encrypted with its own key, H(x)^a, in an order it drew at random
   from the OS (`offer`).
2. answer: each party encrypts the other's points once more and sends them back in the order received:
   B returns (H(x)^a)^b for A's items (`answer`), A returns (H(y)^b)^a for B's.
3. finish: H(x)^ab = H(y)^ba exactly when x = y. A knows which of its items each of its doubly encrypted
   points belongs to, and holds B's doubly encrypted points (it made them), so it learns which of its
   items B has (`intersection`); B likewise.

What crosses: only EC points, each an item of its owner encrypted under one or both secret keys; sizes.
Each party learns the intersection and the other's set size, as NVFlare's DH-PSI workflow lets every
site learn. The coordinator, which relays all four messages, can match the doubly encrypted points and so
learns the intersection's size (which NVFlare's workflow tells it anyway), but no positions in any file:
every party sends its points in a private random order. Exact: points are compared whole (no Bloom filter).

Cost per party: one hash-and-encrypt per own item and one encrypt per peer item (2 EC operations per ID),
where NVFlare's forward and backward DH-PSI passes cost about 7 per ID over both sites. OpenMined's calls
release the GIL, so a thread pool with one cipher object per chunk (same key) uses every core.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

POINT_BYTES = 33  # a compressed P-256 point
CHUNK = 1 << 15  # items per call into OpenMined (one cipher object per chunk)
WORKERS_ENV = "VFLFLARE_PSI_WORKERS"


def _psi():
    import private_set_intersection.python as psi  # noqa: PLC0415 - optional native dependency

    return psi


def default_workers() -> int:
    """Threads for the EC operations: VFLFLARE_PSI_WORKERS, else every core of the machine."""
    configured = os.environ.get(WORKERS_ENV)
    return max(1, int(configured)) if configured else max(1, os.cpu_count() or 1)


def split_points(blob: bytes) -> list[bytes]:
    """Concatenated points -> one bytes object per point."""
    if len(blob) % POINT_BYTES:
        raise ValueError(f"a PSI message of {len(blob)} bytes is not a whole number of {POINT_BYTES}-byte points")
    return [blob[i : i + POINT_BYTES] for i in range(0, len(blob), POINT_BYTES)]


class CommutativeCipher:
    """x -> x^k on P-256 with a secret key k from the OS: `encrypt` hashes items onto the curve first,
    `reencrypt` takes points. Both keep the input order; chunks run on `workers` threads."""

    def __init__(self, workers: int | None = None, key: bytes | None = None) -> None:
        """key: an OpenMined client's or server's private key (GetPrivateKeyBytes), to spread that party's
        work over threads; default a new key from the OS. It never leaves the party."""
        psi = _psi()
        self.workers = workers or default_workers()
        self._key = key or psi.client.CreateWithNewKey(True).GetPrivateKeyBytes()

    def encrypt(self, items: Sequence[str]) -> bytes:
        psi = _psi()

        def one(chunk: Sequence[str]) -> bytes:
            return b"".join(psi.client.CreateFromKey(self._key, True).CreateRequest(list(chunk)).encrypted_elements)

        return self._map(one, items)

    def reencrypt(self, points: bytes) -> bytes:
        psi = _psi()
        elements = split_points(points)

        def one(chunk: Sequence[bytes]) -> bytes:
            request = psi.Request(encrypted_elements=chunk, reveal_intersection=True)  # True: keeps the order
            return b"".join(psi.server.CreateFromKey(self._key, True).ProcessRequest(request).encrypted_elements)

        return self._map(one, elements)

    def _map(self, one: Callable[[Sequence], bytes], values: Sequence) -> bytes:
        size = max(1, min(CHUNK, -(-len(values) // self.workers)))  # every thread busy, chunks bounded
        chunks = [values[i : i + size] for i in range(0, len(values), size)]
        if self.workers == 1 or len(chunks) == 1:
            return b"".join(one(c) for c in chunks)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return b"".join(pool.map(one, chunks))


class ECDHParty:
    """One party of the two-party protocol above, over its unique items (e.g. tagged IDs)."""

    def __init__(self, items: Sequence[str], workers: int | None = None) -> None:
        self.items = list(items)
        if not self.items:
            raise ValueError("PSI needs at least one item")
        if len(set(self.items)) != len(self.items):
            raise ValueError(f"PSI items must be unique: {len(self.items) - len(set(self.items))} duplicates")
        self.cipher = CommutativeCipher(workers)
        # the order this party sends its points in: drawn from the OS, never from the job's public seed
        self.order = np.random.default_rng(secrets.randbits(128)).permutation(len(self.items))
        self._peer: set[bytes] | None = None

    def offer(self) -> bytes:
        """Step 1: own items encrypted with own key, in the private random order."""
        return self.cipher.encrypt([self.items[i] for i in self.order])

    def answer(self, peer_offer: bytes) -> bytes:
        """Step 2: the peer's points encrypted with own key, in the order received (kept for step 3)."""
        doubled = self.cipher.reencrypt(peer_offer)
        self._peer = set(split_points(doubled))
        if len(self._peer) * POINT_BYTES != len(doubled):
            raise ValueError("the peer's PSI offer repeats points: its items are not unique")
        return doubled

    def intersection(self, own_doubled: bytes) -> list[str]:
        """Step 3: the own items the peer also has, in this party's item order."""
        if self._peer is None:
            raise RuntimeError("PSI: intersection() before answer()")
        points = split_points(own_doubled)
        if len(points) != len(self.items):
            raise ValueError(f"PSI: {len(points)} doubly encrypted points came back for {len(self.items)} items")
        peer = self._peer
        hits = sorted(int(self.order[j]) for j, point in enumerate(points) if point in peer)
        return [self.items[i] for i in hits]


def two_party_psi(items_a: Sequence[str], items_b: Sequence[str], workers: int | None = None):
    """The whole protocol in one process (tests, benchmarks): each party's intersection, in its own order."""
    a, b = ECDHParty(items_a, workers), ECDHParty(items_b, workers)
    offer_a, offer_b = a.offer(), b.offer()
    to_a, to_b = b.answer(offer_a), a.answer(offer_b)
    return a.intersection(to_a), b.intersection(to_b)
