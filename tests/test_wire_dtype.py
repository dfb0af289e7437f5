"""wire_dtype: every plaintext float tensor crosses in the chosen precision, on every algorithm's channels,
and the ledger counts exactly the bytes that crossed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from simulator_helpers import per_site, run_job
from test_message_audit import VFLHLP_SPLIT, fast, split

from vflflare import wire
from vflflare.config import ConfigError
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.payload import decode, encode, pack, payload_bytes, tensor_kinds, unpack
from vflflare.registry import algorithms, make_config

SITES = ["site-1", "site-2"]
BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}


@pytest.mark.parametrize("dtype", list(BYTES))
def test_payload_bytes_and_round_trip_per_dtype(dtype):
    rng = np.random.default_rng(0)
    h = rng.normal(size=(10, 32)).astype(np.float32)
    # a list of strings is walked at a glance; one that also holds an array, item by item
    ids, mixed = ["a", "b"], ["a", 1, h[:2]]
    payload = {"h": h, "nested": {"g": [h[:3]]}, "rows": np.arange(10), "k": 3, "ids": ids, "mixed": mixed}
    sent = wire.loads(wire.dumps(encode(payload, dtype)))
    scales = 4 * 3 if dtype == "int8" else 0  # one float32 scale per int8 tensor
    assert payload_bytes(sent) == 15 * 32 * BYTES[dtype] + scales
    assert tensor_kinds(sent) == {"plaintext": 3, "encrypted": 0}
    back = decode(sent)
    assert back["ids"] == ids and back["mixed"][:2] == ["a", 1] and back["mixed"][2].dtype == np.float32
    assert back["h"].dtype == np.float32 and back["h"].shape == h.shape
    np.testing.assert_array_equal(back["rows"], payload["rows"])
    error = np.abs(back["h"] - h)
    if dtype == "float32":
        assert error.max() == 0
    elif dtype == "int8":  # half a quantisation step at most
        assert error.max() <= np.abs(h).max() / 127 / 2 + 1e-7
    else:  # a relative rounding error of half a unit in the last place
        assert (error / np.abs(h)).max() <= {"float16": 2**-11, "bfloat16": 2**-8}[dtype]


def test_bfloat16_rounds_as_torch_does():
    values = np.random.default_rng(1).normal(scale=100, size=4096).astype(np.float32)
    ours = unpack(pack(values, "bfloat16"))
    np.testing.assert_array_equal(ours, torch.from_numpy(values).to(torch.bfloat16).float().numpy())


def test_int8_refuses_non_finite_values_and_keeps_zeros():
    with pytest.raises(ValueError, match="int8.*NaN or infinite"):
        pack(np.array([1.0, np.nan], np.float32), "int8")
    np.testing.assert_array_equal(unpack(pack(np.zeros(4, np.float32), "int8")), 0.0)


def test_config_names_the_wire_dtype_problems():
    with pytest.raises(ConfigError, match="wire_dtype.*must be one of"):
        make_config(wire_dtype="float8")
    with pytest.raises(ConfigError, match="wire_dtype.*float32 with he"):
        make_config(wire_dtype="int8", he=True, label_owner="site-1")
    with pytest.raises(ConfigError, match="fp16 is now wire_dtype"):
        make_config(fp16=True)


# the built-in training plug-ins (test modules register plug-ins of their own, e.g. test_stall's)
TRAINING = sorted(
    name
    for name, plugin in algorithms().items()
    if plugin.__module__.startswith("vflflare.") and name not in ("vertical_inference", "secure_sum")
)
DATA = {"vflhlp": (VFLHLP_SPLIT, {"label_owner": "site-1"}), "cfl": (("--silo-space",), {})}


@pytest.mark.parametrize("algorithm", TRAINING)
def test_every_algorithm_sends_int8_with_exact_byte_counts(tmp_path, algorithm):
    """The same messages as float32, each float tensor a quarter of the bytes plus its 4-byte scale."""
    split_args, extra = DATA.get(algorithm, ((), {}))
    root = str(split(tmp_path, *split_args)) if split_args else None
    settings = {"algorithm": algorithm, **fast(algorithm), **extra}
    full = run_inprocess(make_config(settings), SITES, root)
    small = run_inprocess(make_config(settings, wire_dtype="int8"), SITES, root)
    comm_full, comm_small = full["communication"], small["communication"]
    assert comm_small["wire_dtype"] == "int8" and comm_full["wire_dtype"] == "float32"
    assert comm_small["tensor_kinds"] == comm_full["tensor_kinds"]
    tensors = sum(kinds["plaintext"] for kinds in comm_small["tensor_kinds"].values())
    for key in ("uploads", "downloads"):
        assert comm_small["total"][key] == comm_full["total"][key]
    assert comm_small["total"]["payload_bytes"] == comm_full["total"]["payload_bytes"] // 4 + 4 * tensors
    assert comm_small["total"]["wire_bytes"] < comm_full["total"]["wire_bytes"]
    metric = next(k for k in small["metrics"] if k.startswith("test_"))
    assert np.isfinite(small["metrics"][metric])


@pytest.mark.simulator
def test_simulator_sends_bfloat16_as_in_process(tmp_path):
    """Through NVFlare (tasks, cellnet steps, a label site's relays) the numbers and bytes of the in-process run."""
    settings = {"label_owner": "site-1", "wire_dtype": "bfloat16", "split_epochs": 3, "split_patience": 3}
    results = run_job(tmp_path, "vanilla", **settings)
    assert "error" not in results, results.get("error")
    assert results["communication"]["wire_dtype"] == "bfloat16"
    reference = run_inprocess(make_config(algorithm="vanilla", **settings), SITES, None)
    assert reference["metrics"] == pytest.approx(results["metrics"], abs=1e-6)
    assert reference["communication"]["per_site"] == results["communication"]["per_site"]
    full = run_inprocess(make_config(algorithm="vanilla", **{**settings, "wire_dtype": "float32"}), SITES, None)
    assert {s: 2 * b for s, b in per_site(results, "payload_bytes").items()} == {
        s: row["payload_bytes"] for s, row in full["communication"]["per_site"].items()
    }
    assert results["metrics"]["test_auc"] >= 0.9
