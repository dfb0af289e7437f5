"""What crosses the network: a Payload is a dict of numpy arrays, numbers, strings and nested dicts.

Floating-point arrays are algorithm payload (representations, gradients, probabilities, weights) and
count as communication; integer arrays (row positions), numbers and strings are control.
"""
from __future__ import annotations

from typing import Any

import numpy as np

Payload = dict[str, Any]

# An encrypted float tensor (vflflare.privacy.ckks) is a dict with this key set to True; it counts as
# payload (its ciphertext bytes) and is never touched by the float casts below.
ENCRYPTED_KEY = "__ckks__"


def is_encrypted(value: Any) -> bool:
    return isinstance(value, dict) and value.get(ENCRYPTED_KEY) is True


def payload_bytes(value: Any) -> int:
    """Bytes of floating-point tensors in `value` -- what the papers count as communication cost.
    An encrypted tensor counts with the size of its ciphertexts."""
    if is_encrypted(value):
        return sum(len(chunk) for chunk in value["chunks"])
    if isinstance(value, np.ndarray):
        return int(value.nbytes) if np.issubdtype(value.dtype, np.floating) else 0
    if isinstance(value, dict):
        return sum(payload_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(payload_bytes(v) for v in value)
    return 0


def tensor_kinds(value: Any) -> dict[str, int]:
    """How many plaintext float tensors and encrypted tensors `value` holds, at any depth."""
    counts = {"plaintext": 0, "encrypted": 0}

    def visit(v: Any) -> None:
        if is_encrypted(v):
            counts["encrypted"] += 1
        elif isinstance(v, np.ndarray):
            counts["plaintext"] += int(np.issubdtype(v.dtype, np.floating))
        elif isinstance(v, dict):
            for item in v.values():
                visit(item)
        elif isinstance(v, (list, tuple)):
            for item in v:
                visit(item)

    visit(value)
    return counts


def _map_floats(value: Any, dtype: type) -> Any:
    if is_encrypted(value):
        return value
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
