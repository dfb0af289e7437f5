"""Where long local phases report progress: a log line and a TensorBoard scalar.

The NVFlare executor plugs in a tracker that streams scalars through NVFlare's tracking;
the in-process driver and unit tests use the logging one.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

# Lines for a party's log files that a person running a job need not read on the console (where its data
# and code came from, where a model went): cli.quiet_log_config leaves this logger out of the console.
DETAILS = logging.getLogger("vflflare.details")


class ConsoleLines(logging.Filter):
    """The console filters of cli.quiet_log_config: vflflare's own lines but not DETAILS (`own`), or every
    other logger's (NVFlare's console handler), so that no vflflare line shows twice."""

    def __init__(self, own: bool = True) -> None:
        super().__init__()
        self.own = own

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("vflflare"):
            return not self.own
        return self.own and not record.name.startswith(DETAILS.name)


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
    so far and, at the pace so far, the time left (at most, for a loop that may stop early). The first step
    is reported, and the others at most every `every_s` seconds: a person reads how a long loop goes, not
    forty lines of a loop that took a second."""

    def __init__(
        self, tracker: Tracker, what: str, total: int, first: int = 0, early_stop: bool = False, every_s: float = 10.0
    ) -> None:
        self.tracker, self.what, self.total, self.first = tracker, what, total, first
        self.bound = " at most" if early_stop else ""
        self.start = self.reported = time.monotonic()
        self.every_s = every_s

    def step(self, done: int, detail: str = "") -> None:
        """`done` steps of `total` finished (counting any before a resume, `first`)."""
        now = time.monotonic()  # the loop's own "done" line follows the last step
        if done != self.first + 1 and now - self.reported < self.every_s:
            return
        self.reported = now
        elapsed = now - self.start
        pace = elapsed / max(done - self.first, 1)
        left = pace * (self.total - done)
        self.tracker.info(
            f"{self.what} {done}/{self.total}"
            + (f", {detail}" if detail else "")
            + f"; {elapsed:.0f} s, about {left:.0f} s left{self.bound if done < self.total else ''}"
        )
