"""One run at the coordinator as a building block sees it (algorithms/blocks): the blocks take this one
object plus keyword-only options, instead of the same handful of arguments passed by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vflflare.config import JobConfig
from vflflare.protocol.transport import Transport
from vflflare.tracking import Tracker


@dataclass
class RunContext:
    net: Transport  # the sites
    label: Any = None  # the label party, or its proxy on a label-owning site (protocol/label_proxy.py)
    cfg: JobConfig | None = None  # the job's config: the plug-in's Config, with the settings of its blocks
    tracker: Tracker | None = None
    info: dict[str, Any] = field(default_factory=dict)  # what the run reports besides metrics (epochs run, ...)
    he_context: Any = None  # the coordinator's public CKKS context with `he` on: it can add, never decrypt
