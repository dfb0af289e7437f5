"""Communication and wall-time accounting, in the units of the papers' tables.

An upload is one site->coordinator message carrying payload, a download one coordinator->site
message carrying payload; messages without payload are control and only add wire bytes.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from typing import Iterator

from vflflare.algorithms.payload import Payload, payload_bytes

KEYS = ("uploads", "downloads", "payload_bytes", "wire_bytes")


def _zero() -> dict[str, int]:
    return dict.fromkeys(KEYS, 0)


class CommLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.per_site: dict[str, dict[str, int]] = defaultdict(_zero)
        self.per_phase: dict[str, dict[str, int]] = defaultdict(_zero)
        self.phases: list[dict[str, float | str]] = []
        self.current = "setup"
        self._start = time.monotonic()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        previous, self.current = self.current, name
        start = time.monotonic()
        try:
            yield
        finally:
            self.phases.append({"name": name, "wall_s": round(time.monotonic() - start, 4)})
            self.current = previous

    def record(self, site: str, direction: str, payload: Payload | None, wire_bytes: int) -> None:
        """direction: 'up' (site->coordinator) or 'down' (coordinator->site)."""
        nbytes = payload_bytes(payload) if payload else 0
        with self._lock:
            for bucket in (self.per_site[site], self.per_phase[self.current]):
                bucket["wire_bytes"] += int(wire_bytes)
                if nbytes:
                    bucket["uploads" if direction == "up" else "downloads"] += 1
                    bucket["payload_bytes"] += nbytes

    def summary(self) -> dict:
        total = _zero()
        for row in self.per_site.values():
            for key in KEYS:
                total[key] += row[key]
        return {
            "total": total,
            "per_site": {k: dict(v) for k, v in sorted(self.per_site.items())},
            "per_phase": {k: dict(v) for k, v in self.per_phase.items()},
        }

    def wall_s(self) -> float:
        return round(time.monotonic() - self._start, 4)
