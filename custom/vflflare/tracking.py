"""Where long local phases report progress: a log line and a TensorBoard scalar.

The NVFlare executor plugs in a tracker that streams scalars through NVFlare's tracking;
the in-process driver and unit tests use the logging one.
"""
from __future__ import annotations

import logging
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
