"""Communication and wall-time accounting, in the units of the papers' tables.

An upload is one site->coordinator message carrying payload, a download one coordinator->site
message carrying payload; messages without payload are control and only add wire bytes.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

from vflflare.protocol.payload import Payload, payload_bytes, tensor_kinds

KEYS = ("uploads", "downloads", "payload_bytes", "wire_bytes")


def _zero() -> dict[str, int]:
    return dict.fromkeys(KEYS, 0)


class CommLedger:
    def __init__(self, wire_dtype: str = "float32") -> None:
        self.wire_dtype = wire_dtype  # the precision float tensors crossed in (payload.encode)
        self._lock = threading.Lock()
        self.per_site: dict[str, dict[str, int]] = defaultdict(_zero)
        self.per_phase: dict[str, dict[str, int]] = defaultdict(_zero)
        self.per_phase_site: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(_zero))
        self.phases: list[dict[str, float | str | bool]] = []
        self.current = "setup"
        self._start = time.monotonic()
        self._step_s: list[float] = []
        # float tensors that crossed, by direction and kind: with HE on, the coordinator must only ever
        # see "encrypted" ones (vflflare.privacy.ckks)
        self.tensor_kinds = {d: {"plaintext": 0, "encrypted": 0} for d in ("up", "down")}
        # coordinator round trips, each to all its sites at once: what a link's latency multiplies
        self.rounds = {"exchange": 0, "step": 0}
        # the innermost phase an exception left first: a failed job's results name it, while
        # `current` has already unwound to the outer phase by the time the job reports the error
        self.failed_phase: str | None = None
        self.on_phase: Callable[[str], None] | None = None  # told each phase's name as it starts (logging)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        previous, self.current = self.current, name
        if self.on_phase is not None:
            self.on_phase(name)
        start = time.monotonic()
        entry: dict[str, float | str | bool] = {"name": name}
        try:
            yield
        except BaseException:
            if self.failed_phase is None:
                self.failed_phase = name
            entry["failed"] = True
            raise
        finally:
            entry["wall_s"] = round(time.monotonic() - start, 4)
            self.phases.append(entry)
            self.current = previous

    def failure_phase(self) -> str:
        """The phase a failure happened in: the innermost one an exception left, else the current one."""
        return self.failed_phase or self.current

    def steps_done(self) -> int:
        """Per-batch round trips timed so far (split-NN progress)."""
        return len(self._step_s)

    @contextlib.contextmanager
    def timed_step(self) -> Iterator[None]:
        """Time one per-batch round trip (all sites), for the split-NN step latency in the results."""
        start = time.monotonic()
        try:
            yield
        finally:
            self._step_s.append(time.monotonic() - start)

    def step_latency(self) -> dict[str, float]:
        """{'steps', 'median_ms', 'p90_ms'} of the timed steps; empty when there were none."""
        if not self._step_s:
            return {}
        ms = sorted(1000 * s for s in self._step_s)
        p90 = ms[int(0.9 * (len(ms) - 1))]
        return {"steps": len(ms), "median_ms": round(statistics.median(ms), 3), "p90_ms": round(p90, 3)}

    def count_round(self, kind: str) -> None:
        """kind: 'exchange' (an NVFlare task per site) or 'step' (a cellnet request per site)."""
        with self._lock:
            self.rounds[kind] += 1

    def record(self, site: str, direction: str, payload: Payload | None, wire_bytes: int) -> None:
        """direction: 'up' (site->coordinator) or 'down' (coordinator->site)."""
        nbytes = payload_bytes(payload) if payload else 0
        kinds = tensor_kinds(payload) if payload else {}
        with self._lock:
            for kind, count in kinds.items():
                self.tensor_kinds[direction][kind] += count
            for bucket in (self.per_site[site], self.per_phase[self.current], self.per_phase_site[self.current][site]):
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
            "per_phase_site": {
                p: {s: dict(v) for s, v in sorted(row.items())} for p, row in self.per_phase_site.items()
            },
            "tensor_kinds": {d: dict(v) for d, v in self.tensor_kinds.items()},
            "wire_dtype": self.wire_dtype,
            "rounds": dict(self.rounds),
        }

    def wall_s(self) -> float:
        return round(time.monotonic() - self._start, 4)
