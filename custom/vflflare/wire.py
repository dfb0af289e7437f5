"""Payload <-> bytes. msgpack with numpy arrays as (dtype, shape, raw bytes): safe to load (no pickle),
and len() of the bytes is what a message costs on top of the transport's envelope."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

_ND = "__ndarray__"


def _default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        return {_ND: True, "dtype": array.dtype.str, "shape": list(array.shape), "data": array.tobytes()}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"cannot put {type(value).__name__} on the wire")


def _hook(obj: dict) -> Any:
    if obj.get(_ND) is True:
        return np.frombuffer(obj["data"], dtype=np.dtype(obj["dtype"])).reshape(obj["shape"]).copy()
    return obj


def dumps(payload: dict[str, Any]) -> bytes:
    return msgpack.packb(payload, default=_default, use_bin_type=True)


def loads(data: bytes) -> dict[str, Any]:
    return msgpack.unpackb(data, object_hook=_hook, raw=False, strict_map_key=False)
