"""How a flow talks to the sites, whatever carries the messages.

`exchange` is a phase-level round trip (an NVFlare task: job Filters apply); `step` is a per-batch
round trip (a cellnet request from the server's job cell to the site's: no task scheduling cost, and
not an NVFlare aux message; see ARCHITECTURE.md). Both send each listed site its payload,
run `task` there and return each site's reply, recording every message in `ledger`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from vflflare.protocol.ledger import CommLedger
from vflflare.protocol.payload import Payload


class Transport(Protocol):
    sites: list[str]
    ledger: CommLedger

    def announce_model(self, model_id: str) -> None:
        """Tell every site the ID it saves this run's model under, outside the counted messages."""
        ...

    def exchange(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]: ...

    def step(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]: ...


class TransportError(RuntimeError):
    """A site failed or did not answer in time; the message names the site and the task. `site` is the
    site to blame where one is known (the job's results file names it)."""

    def __init__(self, message: str, site: str | None = None) -> None:
        super().__init__(message)
        self.site = site
