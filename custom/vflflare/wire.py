"""Payload <-> bytes. msgpack with numpy arrays as (dtype, shape, raw bytes): safe to load (no pickle),
and len() of the bytes is what a message costs on top of the transport's envelope."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

Payload = dict[str, Any]  # what a message carries: numpy arrays, numbers, strings and nested dicts

# An encrypted float tensor (vflflare.privacy.ckks) is a dict with this key set to True; it counts as
# payload (its ciphertext bytes) and is never touched by the float casts of protocol/payload.py.
ENCRYPTED_KEY = "__ckks__"
WIRE_DTYPES = ("float32", "float16", "bfloat16", "int8")  # a job's wire_dtype: how float tensors travel
LABEL_PREFIX = "label."  # a call to a remote label party travels as the task "label.<method>"

_ND = "__ndarray__"


def is_encrypted(value: Any) -> bool:
    return isinstance(value, dict) and value.get(ENCRYPTED_KEY) is True


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
