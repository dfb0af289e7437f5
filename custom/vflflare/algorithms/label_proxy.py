"""The label party as the coordinator sees it when a site owns the labels: same methods as
LabelParty, each a message to that site; the coordinator only relays."""
from __future__ import annotations

from typing import Any

from vflflare.algorithms.site_runtime import LABEL_METHODS, LABEL_PREFIX
from vflflare.algorithms.transport import Transport


class RemoteLabelParty:
    def __init__(self, net: Transport, site: str, num_classes: int) -> None:
        self.net, self.site, self.num_classes = net, site, num_classes
        self.metric_name = "auc" if num_classes == 2 else "accuracy"

    def __getattr__(self, method: str) -> Any:
        if method not in LABEL_METHODS:
            raise AttributeError(method)
        send = getattr(self.net, LABEL_METHODS[method])

        def call(*args: Any) -> Any:
            reply = send(LABEL_PREFIX + method, {self.site: {"args": list(args)}})
            result = reply[self.site]["result"]
            # msgpack turns tuples into lists; split_step returns (grads, loss)
            return tuple(result) if method == "split_step" else result

        return call
