"""Every message of a run, kept at the coordinator's transport (`record_messages: true`): what each party
received, which the attacks (vflflare.attacks) read. A site receives the requests the coordinator sends it;
the label party receives every site's replies, wherever it runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from vflflare.protocol.ledger import CommLedger
from vflflare.protocol.transport import Transport
from vflflare.wire import Payload


@dataclass
class Message:
    task: str
    site: str
    request: Payload  # coordinator -> site
    reply: Payload  # site -> coordinator


@dataclass
class RecordingTransport:
    """A Transport that keeps every request and reply of the one it wraps, in order."""

    inner: Transport
    messages: list[Message] = field(default_factory=list)

    @property
    def sites(self) -> list[str]:
        return self.inner.sites

    @property
    def ledger(self) -> CommLedger:
        return self.inner.ledger

    def _keep(self, task: str, payloads: Mapping[str, Payload], replies: dict[str, Payload]) -> dict[str, Payload]:
        self.messages += [Message(task, site, payloads[site], replies.get(site, {})) for site in payloads]
        return replies

    def announce_model(self, model_id: str) -> None:
        self.inner.announce_model(model_id)

    def exchange(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        return self._keep(task, payloads, self.inner.exchange(task, payloads))

    def step(self, task: str, payloads: Mapping[str, Payload]) -> dict[str, Payload]:
        return self._keep(task, payloads, self.inner.step(task, payloads))


MESSAGES_FILE = "vflflare_messages.pt"  # a recorded run's messages, in the server's run folder


def save_messages(path: str | Path, messages: list[Message]) -> Path:
    """Write a run's messages (torch's format: payloads hold arrays and nested dicts)."""
    torch.save([vars(m) for m in messages], path)
    return Path(path)


def load_messages(path: str | Path) -> list[Message]:
    return [Message(**m) for m in torch.load(path, weights_only=False)]
