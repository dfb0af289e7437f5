"""Where long local phases report progress: a log line and a TensorBoard scalar.

The NVFlare executor plugs in a tracker that streams scalars through NVFlare's tracking;
the in-process driver and unit tests use the logging one.
"""
from __future__ import annotations

import logging
import time
from typing import Protocol


class Tracker(Protocol):
    def scalar(self, tag: str, value: float, step: int) -> None: ...

    def info(self, message: str) -> None: ...


class LogTracker:
    def __init__(self, name: str = "vflflare") -> None:
        self.log = logging.getLogger(name)

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.log.debug("%s step %d: %.5f", tag, step, value)

    def info(self, message: str) -> None:
        self.log.info(message)


class Progress:
    """A log line for a step of a training loop (an epoch, a round): `what i/N`, the step's numbers, the time
    so far and, at the pace so far, the time left (at most, for a loop that may stop early). The first and
    the last step are reported, and the others at most every `every_s` seconds: a person reads how a long
    loop goes, not forty lines of a loop that took a second."""

    def __init__(self, tracker: Tracker, what: str, total: int, first: int = 0, early_stop: bool = False,
                 every_s: float = 10.0) -> None:
        self.tracker, self.what, self.total, self.first = tracker, what, total, first
        self.bound = " at most" if early_stop else ""
        self.start = self.reported = time.monotonic()
        self.every_s = every_s

    def step(self, done: int, detail: str = "") -> None:
        """`done` steps of `total` finished (counting any before a resume, `first`)."""
        now = time.monotonic()
        if done not in (self.first + 1, self.total) and now - self.reported < self.every_s:
            return
        self.reported = now
        elapsed = now - self.start
        pace = elapsed / max(done - self.first, 1)
        left = pace * (self.total - done)
        self.tracker.info(f"{self.what} {done}/{self.total}" + (f", {detail}" if detail else "")
                          + f"; {elapsed:.0f} s, about {left:.0f} s left{self.bound if done < self.total else ''}")
