"""The label party as the coordinator sees it when a site owns the labels: the same methods as the
plug-in's LabelParty, each a message to that site over the channel the plug-in declared for it; the
coordinator only relays."""

from __future__ import annotations

from typing import Any

from vflflare.protocol.transport import Transport
from vflflare.wire import LABEL_PREFIX


class RemoteLabelParty:
    classes: list[str] | None = None  # the label site's class names (labels.json "classes"), if it gave them

    def __init__(self, net: Transport, site: str, num_classes: int, channels: dict[str, str]) -> None:
        self.net, self.site, self.num_classes, self.channels = net, site, num_classes, channels
        self.metric_name = "auc" if num_classes == 2 else "accuracy"

    def __getattr__(self, method: str) -> Any:
        if method not in self.channels:
            raise AttributeError(method)
        send = getattr(self.net, self.channels[method])

        def call(*args: Any) -> Any:
            reply = send(LABEL_PREFIX + method, {self.site: {"args": list(args)}})
            result = reply[self.site]["result"]
            return tuple(result) if isinstance(result, list) else result  # msgpack turns tuples into lists

        return call
