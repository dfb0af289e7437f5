"""What crosses the network: a Payload is a dict of numpy arrays, numbers, strings and nested dicts.

Floating-point arrays are algorithm payload (representations, gradients, probabilities, weights) and
count as communication; integer arrays (row positions), numbers and strings are control.
"""
from __future__ import annotations

from typing import Any

import numpy as np

Payload = dict[str, Any]


def payload_bytes(value: Any) -> int:
    """Bytes of floating-point tensors in `value` -- what the papers count as communication cost."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes) if np.issubdtype(value.dtype, np.floating) else 0
    if isinstance(value, dict):
        return sum(payload_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(payload_bytes(v) for v in value)
    return 0


def _map_floats(value: Any, dtype: type) -> Any:
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        return value.astype(dtype, copy=False)
    if isinstance(value, dict):
        return {k: _map_floats(v, dtype) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_floats(v, dtype) for v in value]
    return value


def encode(payload: Payload, fp16: bool) -> Payload:
    """Cast float tensors to the wire precision (fp16 halves the payload)."""
    return _map_floats(payload, np.float16 if fp16 else np.float32)


def decode(payload: Payload) -> Payload:
    """Parties always compute in float32, whatever travelled."""
    return _map_floats(payload, np.float32)
