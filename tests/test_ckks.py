"""CKKS codec (vflflare.privacy.ckks): round trips, addition under encryption, payload mapping, keys."""

import numpy as np
import pytest

from vflflare import wire
from vflflare.privacy import ckks
from vflflare.protocol.payload import decode, encode, is_encrypted, payload_bytes, tensor_kinds


@pytest.fixture(scope="module")
def keys():
    server, client = ckks.make_contexts()
    return ckks.load_context(server, "server"), ckks.load_context(client, "client")


@pytest.mark.parametrize("shape", [(), (1,), (7,), (5, 3), (2, 3, 4), (3, 3000), (0,), (0, 4)])
def test_round_trip_any_shape_within_1e_3(keys, shape):
    _, client = keys
    x = np.asarray(np.random.default_rng(0).standard_normal(shape) * 10, dtype=np.float32)
    enc = ckks.encrypt(x, client)
    assert is_encrypted(enc)
    assert len(enc["chunks"]) == -(-x.size // client.slot_count)  # ceil: 3 x 3000 values -> 3 chunks of 4096
    out = ckks.decrypt(wire.loads(wire.dumps({"t": enc}))["t"], client)  # survives the wire
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_allclose(out, x, atol=1e-3)


def test_dtype_kept(keys):
    _, client = keys
    for dtype in (np.float16, np.float32, np.float64):
        x = np.linspace(-1, 1, 10, dtype=dtype)
        assert ckks.decrypt(ckks.encrypt(x, client), client).dtype == dtype
    with pytest.raises(TypeError):
        ckks.encrypt(np.arange(3), client)


def test_server_context_adds_but_cannot_decrypt_or_encrypt(keys):
    server, client = keys
    rng = np.random.default_rng(1)
    parts = [rng.standard_normal((40, 250)).astype(np.float32) for _ in range(3)]  # 10000 values, 3 chunks
    total = ckks.add([ckks.encrypt(p, client) for p in parts], server)
    np.testing.assert_allclose(ckks.decrypt(total, client), sum(parts), atol=1e-3)
    with pytest.raises(ckks.HEContextError, match="no secret key"):
        ckks.decrypt(total, server)
    with pytest.raises(ckks.HEContextError, match="cannot encrypt"):
        ckks.encrypt(parts[0], server)
    with pytest.raises(ValueError, match="shapes"):
        ckks.add([ckks.encrypt(parts[0], client), ckks.encrypt(parts[0][:10], client)], server)


def test_payload_mapping_encrypts_float_tensors_only(keys):
    server, client = keys
    payload = {
        "h": np.ones((4, 3), np.float32),
        "rows": np.arange(4),
        "k": 3,
        "name": "x",
        "nested": {"aligned": np.full(5, 0.5, np.float32), "parts": [np.zeros(2, np.float16), 1.5]},
    }
    enc = ckks.encrypt_payload(payload, client)
    assert tensor_kinds(enc) == {"plaintext": 0, "encrypted": 3}
    assert enc["rows"] is payload["rows"] and enc["k"] == 3 and enc["nested"]["parts"][1] == 1.5
    # the ledger counts ciphertext bytes as payload; wire casts and decode leave ciphertexts alone
    assert payload_bytes(enc) == sum(
        len(c) for e in (enc["h"], enc["nested"]["aligned"], enc["nested"]["parts"][0]) for c in e["chunks"]
    )
    assert payload_bytes(enc) > 100 * payload_bytes(payload)
    assert decode(encode(enc, "int8"))["h"] is enc["h"]
    out = ckks.decrypt_payload(wire.loads(wire.dumps(enc)), client)
    assert tensor_kinds(out) == {"plaintext": 3, "encrypted": 0}
    np.testing.assert_allclose(out["nested"]["aligned"], 0.5, atol=1e-3)
    np.testing.assert_array_equal(out["rows"], payload["rows"])
    # sum of payloads: ciphertexts added, numbers summed, equal control values kept
    summed = ckks.add_payloads([enc, enc], server)
    np.testing.assert_allclose(ckks.decrypt_payload(summed, client)["h"], 2.0, atol=1e-3)
    assert summed["k"] == 6 and summed["name"] == "x"
    with pytest.raises(TypeError, match="plaintext"):
        ckks.add_payloads([payload, payload], server)


def test_wrong_or_missing_context_is_a_clear_error(tmp_path, keys):
    server_bytes, client_bytes = ckks.make_contexts()
    with pytest.raises(ckks.HEContextError, match="client_context.tenseal does not exist"):
        ckks.load_context(tmp_path / "client_context.tenseal", "client")
    with pytest.raises(ckks.HEContextError, match="holds no secret key"):
        ckks.load_context(server_bytes, "client")
    with pytest.raises(ckks.HEContextError, match="holds the secret key"):
        ckks.load_context(client_bytes, "server")
    with pytest.raises(ckks.HEContextError, match="not a TenSEAL context"):
        ckks.load_context(b"not a context", "client")
    # a site with a different client context: refused by fingerprint, not decrypted to garbage
    other = ckks.load_context(client_bytes, "client")
    _, client = keys
    with pytest.raises(ckks.HEContextError, match="made with key"):
        ckks.decrypt(ckks.encrypt(np.ones(3, np.float32), other), client)
    with pytest.raises(ckks.HEContextError, match="different keys"):
        ckks.add([ckks.encrypt(np.ones(3, np.float32), other), ckks.encrypt(np.ones(3, np.float32), client)], keys[0])


def test_write_contexts_like_hebuilder(tmp_path):
    paths = ckks.write_contexts(tmp_path / "startup")
    assert sorted(p.name for p in paths.values()) == ["client_context.tenseal", "server_context.tenseal"]
    server = ckks.load_context(paths["server"], "server")
    client = ckks.load_context(paths["client"], "client")
    assert client.slot_count == server.slot_count == ckks.POLY_MODULUS_DEGREE // 2
    before = paths["client"].read_bytes()
    ckks.write_contexts(tmp_path / "startup")  # kept: sites and server must keep sharing one pair
    assert paths["client"].read_bytes() == before
    # the same key loaded twice has the same fingerprint
    assert ckks.load_context(paths["client"], "client").key_id == client.key_id


def test_contexts_from_nvflare_hebuilder_load(tmp_path):
    """The files NVFlare's provisioning writes are what the codec reads."""
    from nvflare.lighter.impl.he import HEBuilder

    builder = HEBuilder()
    builder.initialize(None, None)
    server = ckks.load_context(builder.get_serialized_context(), "server")
    client = ckks.load_context(builder.get_serialized_context(is_client=True), "client")
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_allclose(ckks.decrypt(ckks.add([ckks.encrypt(x, client)] * 2, server), client), 2 * x, atol=1e-3)
