"""What crosses the network: a Payload is a dict of numpy arrays, numbers, strings and nested dicts.

Floating-point arrays are algorithm payload (representations, gradients, probabilities, weights) and
count as communication; integer arrays (row positions), numbers and strings are control.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vflflare.wire import WIRE_DTYPES, Payload, is_encrypted

# A float tensor packed narrower than numpy's float16 can say: {PACKED_KEY: "bfloat16", "bits": uint16}
# or {PACKED_KEY: "int8", "q": int8, "scale": float}. Counts as payload; decode unpacks it to float32.
PACKED_KEY = "__packed__"
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _scalars_only(value: list | tuple) -> bool:
    """A list holding no array or dict (IDs, digests, metrics): one type check per item, where walking it would
    take a call per item (a scoring job's 800k IDs)."""
    return all(type(v) in _SCALARS for v in value)


def is_packed(value: Any) -> bool:
    return isinstance(value, dict) and value.get(PACKED_KEY) in WIRE_DTYPES


def payload_bytes(value: Any) -> int:
    """Bytes of floating-point tensors in `value` -- what the papers count as communication cost.
    An encrypted tensor counts with the size of its ciphertexts, an int8 one with its 4-byte scale."""
    if is_encrypted(value):
        return sum(len(chunk) for chunk in value["chunks"])
    if is_packed(value):
        return int(value["bits"].nbytes) if value[PACKED_KEY] == "bfloat16" else int(value["q"].nbytes) + 4
    if isinstance(value, np.ndarray):
        return int(value.nbytes) if np.issubdtype(value.dtype, np.floating) else 0
    if isinstance(value, dict):
        return sum(payload_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)) and not _scalars_only(value):
        return sum(payload_bytes(v) for v in value)
    return 0


def tensor_kinds(value: Any) -> dict[str, int]:
    """How many plaintext float tensors and encrypted tensors `value` holds, at any depth."""
    counts = {"plaintext": 0, "encrypted": 0}

    def visit(v: Any) -> None:
        if is_encrypted(v):
            counts["encrypted"] += 1
        elif is_packed(v):
            counts["plaintext"] += 1
        elif isinstance(v, np.ndarray):
            counts["plaintext"] += int(np.issubdtype(v.dtype, np.floating))
        elif isinstance(v, dict):
            for item in v.values():
                visit(item)
        elif isinstance(v, (list, tuple)) and not _scalars_only(v):
            for item in v:
                visit(item)

    visit(value)
    return counts


def pack(array: np.ndarray, wire_dtype: str) -> np.ndarray | dict[str, Any]:
    """One float tensor in the wire precision. bfloat16: float32 rounded to nearest-even on its top 16
    bits; int8: symmetric, one scale per tensor (its largest magnitude maps to 127)."""
    array = np.asarray(array, dtype=np.float32)
    if wire_dtype in ("float32", "float16"):
        return array.astype(wire_dtype, copy=False)
    if wire_dtype == "bfloat16":
        bits = np.ascontiguousarray(array).view(np.uint32).astype(np.uint64)
        return {PACKED_KEY: "bfloat16", "bits": ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)}
    if wire_dtype == "int8":
        peak = float(np.max(np.abs(array))) if array.size else 0.0
        if not np.isfinite(peak):
            raise ValueError("wire_dtype int8: a tensor to send holds NaN or infinite values")
        scale = peak / 127 if peak > 0 else 1.0
        return {PACKED_KEY: "int8", "q": np.clip(np.rint(array / scale), -127, 127).astype(np.int8), "scale": scale}
    raise ValueError(f"wire_dtype must be one of {list(WIRE_DTYPES)}, got {wire_dtype!r}")


def unpack(value: dict[str, Any]) -> np.ndarray:
    if value[PACKED_KEY] == "bfloat16":
        return (np.asarray(value["bits"], dtype=np.uint32) << 16).view(np.float32)
    return np.asarray(value["q"], dtype=np.float32) * np.float32(value["scale"])


def _map_floats(value: Any, on_float) -> Any:
    if is_encrypted(value):
        return value
    if is_packed(value):
        return unpack(value)
    if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
        return on_float(value)
    if isinstance(value, dict):
        return {k: _map_floats(v, on_float) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # a label site's results are tuples; the wire makes them lists
        return list(value) if _scalars_only(value) else [_map_floats(v, on_float) for v in value]
    return value


def encode(payload: Payload, wire_dtype: str) -> Payload:
    """Every plaintext float tensor in the wire precision (`wire_dtype`, ledger.py records it)."""
    return _map_floats(payload, lambda array: pack(array, wire_dtype))


def decode(payload: Payload) -> Payload:
    """Parties always compute in float32, whatever travelled."""
    return _map_floats(payload, lambda array: array.astype(np.float32, copy=False))
