"""CKKS homomorphic encryption of float tensors (TenSEAL), for payloads that cross the coordinator.

The keys are the ones NVFlare itself provisions (`HEBuilder` in project.yml, `nvflare poc prepare -he`):
- `client_context.tenseal` in every site's startup kit: the full context, with the secret key, the
  same for all sites. Sites encrypt and decrypt with it.
- `server_context.tenseal` in the server's startup kit: parameters and relinearisation keys only, no
  secret key. The coordinator can add ciphertexts with it but can neither decrypt nor encrypt.

With the labels on a site, point-to-point tensors use per-party keys instead (`make_key_pair`,
`load_public`; who encrypts for whom: privacy/he_keys.py); the kit's shared key is left for secure
aggregation, and its parameters are the ones every party key must have.

`make_contexts` makes the same pair with the same parameters (CKKS, poly modulus degree 8192,
coefficient moduli [60, 40, 40] bits, scale 2^40, symmetric encryption), for the simulator.

An encrypted tensor is a plain dict (msgpack-serialisable, so it rides in a Payload like an array):
    {"__ckks__": True, "dtype": "<f4", "shape": [..], "chunks": [bytes, ...], "key": "..."}
The flattened tensor is cut into chunks of the context's slot count (4096 for degree 8192); each chunk
is one serialised CKKSVector (~235 kB whatever the number of values in it). "key" is a fingerprint of
the secret key (a domain-separated SHA-256, truncated), so a site holding a different client context
gets a clear error instead of garbage, and the coordinator refuses to add ciphertexts of different keys.

Pure: no NVFlare import. The NVFlare side (finding the files in the startup kit, Filters) is
`vflflare.flare.he_filters`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.wire import ENCRYPTED_KEY, Payload, is_encrypted

SERVER_CONTEXT_FILE = "server_context.tenseal"  # nvflare.lighter.constants.ProvFileName.SERVER_CONTEXT_TENSEAL
CLIENT_CONTEXT_FILE = "client_context.tenseal"  # ... CLIENT_CONTEXT_TENSEAL
CONTEXT_FILES = {"server": SERVER_CONTEXT_FILE, "client": CLIENT_CONTEXT_FILE}

# nvflare.lighter.impl.he.HEBuilder's defaults
POLY_MODULUS_DEGREE = 8192
COEFF_MOD_BIT_SIZES = (60, 40, 40)
SCALE_BITS = 40

HOW_TO_GET_KEYS = (
    "simulator: `vflflare he-keys -w WORKSPACE` before the run; POC: `nvflare poc prepare -he`; "
    "provisioned project: HEBuilder in project.yml"
)


class HEContextError(ValueError):
    """A CKKS context is missing, unreadable, of the wrong kind, or does not match a ciphertext."""


def _ts():
    import tenseal  # imported on first use: only jobs with HE on pay for it

    return tenseal


@dataclass
class HEContext:
    """A loaded TenSEAL context and what the codec needs to know about it."""

    context: Any  # tenseal.Context
    role: str  # "client" (has the secret key) or "server" (no secret key)
    source: str  # where it came from, for error messages
    slot_count: int
    key_id: str | None  # fingerprint of the secret key; None for a server context

    @property
    def can_decrypt(self) -> bool:
        return self.role == "client"

    @property
    def can_encrypt(self) -> bool:
        """A client context, or a party's published public context (role "public", per-party keys)."""
        return self.role in ("client", "public")


def make_contexts(
    poly_modulus_degree: int = POLY_MODULUS_DEGREE,
    coeff_mod_bit_sizes: Iterable[int] = COEFF_MOD_BIT_SIZES,
    scale_bits: int = SCALE_BITS,
) -> tuple[bytes, bytes]:
    """(server context, client context) as serialised by NVFlare's HEBuilder."""
    ts = _ts()
    context = ts.context(
        ts.SCHEME_TYPE.CKKS,
        poly_modulus_degree=poly_modulus_degree,
        coeff_mod_bit_sizes=list(coeff_mod_bit_sizes),
        encryption_type=ts.ENCRYPTION_TYPE.SYMMETRIC,
    )
    context.generate_relin_keys()
    context.global_scale = 2**scale_bits

    def serialise(is_client: bool) -> bytes:
        return context.serialize(
            save_public_key=is_client, save_secret_key=is_client, save_galois_keys=False, save_relin_keys=True
        )

    return serialise(False), serialise(True)


def write_contexts(startup_dir: str | Path, overwrite: bool = False) -> dict[str, Path]:
    """Write server_context.tenseal and client_context.tenseal into `startup_dir` (the simulator's
    <workspace>/startup/, which NVFlare copies into every participant's startup kit). Existing files
    are kept unless `overwrite`: sites and server must share one pair."""
    folder = Path(startup_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {role: folder / name for role, name in CONTEXT_FILES.items()}
    if not overwrite and all(p.exists() for p in paths.values()):
        return paths
    server, client = make_contexts()
    for role, data in (("server", server), ("client", client)):
        tmp = paths[role].with_suffix(".tmp")
        tmp.write_bytes(data)
        os.chmod(tmp, 0o600 if role == "client" else 0o644)
        tmp.replace(paths[role])
    return paths


def _key_id(context: Any) -> str:
    """Fingerprint of the secret key. SEAL writes the same bytes for the same key on every load
    (contexts with relinearisation keys do not: those are re-expanded from a fresh seed)."""
    with tempfile.TemporaryDirectory(prefix="vflflare-he-") as folder:
        path = os.path.join(folder, "sk")
        context.secret_key().data.save(path)
        with open(path, "rb") as f:
            digest = hashlib.sha256(b"vflflare-ckks-key-id\0" + f.read()).hexdigest()
    return digest[:16]


def load_context(source: bytes | str | Path, role: str, name: str | None = None, n_threads: int = 1) -> HEContext:
    """Load a serialised context. role 'client' requires the secret key; role 'server' refuses one (the
    coordinator must never be able to decrypt). `name` describes the source in errors."""
    if role not in CONTEXT_FILES:
        raise ValueError(f"role must be 'client' or 'server', got {role!r}")
    if isinstance(source, (str, Path)):
        name = name or str(source)
        path = Path(source)
        if not path.is_file():
            raise HEContextError(f"HE is on but the {role} context {path} does not exist ({HOW_TO_GET_KEYS})")
        data = path.read_bytes()
    else:
        data = bytes(source)
        name = name or f"<{role} context bytes>"
    if not data:
        raise HEContextError(f"HE {role} context {name} is empty ({HOW_TO_GET_KEYS})")
    ts = _ts()
    try:
        context = ts.context_from(data, n_threads=n_threads)
    except Exception as error:
        raise HEContextError(f"HE {role} context {name} is not a TenSEAL context: {error}") from error
    parms = context.seal_context().data.key_context_data().parms()
    if getattr(parms.scheme(), "name", None) != "CKKS":
        raise HEContextError(f"HE {role} context {name} is not a CKKS context (scheme {parms.scheme()})")
    private = context.is_private()
    if role == "client" and not private:
        raise HEContextError(
            f"HE client context {name} holds no secret key (is it a {SERVER_CONTEXT_FILE}?): sites need "
            f"{CLIENT_CONTEXT_FILE} ({HOW_TO_GET_KEYS})"
        )
    if role == "server" and private:
        raise HEContextError(
            f"HE server context {name} holds the secret key (is it a {CLIENT_CONTEXT_FILE}?): the coordinator "
            f"must only have {SERVER_CONTEXT_FILE}, which cannot decrypt"
        )
    return HEContext(
        context=context,
        role=role,
        source=name,
        slot_count=int(parms.poly_modulus_degree()) // 2,
        key_id=_key_id(context) if private else None,
    )


# ---------------------------------------------------------------------------------- per-party keys
# A party that receives ciphertexts point to point (privacy/he_keys.py) makes its own key pair for the job:
# public-key (asymmetric) CKKS with the kit context's parameters, TenSEAL's own randomness, the secret key in
# memory only. It publishes the public context, which encrypts but cannot decrypt.


def _parms_id(context: Any) -> list[int]:
    return list(context.seal_context().data.key_context_data().parms_id())


def party_key_id(public: bytes) -> str:
    """The fingerprint a party's key goes by: of its public context as published (sender and receiver
    both hold those bytes)."""
    return hashlib.sha256(b"vflflare-ckks-party-key\0" + bytes(public)).hexdigest()[:16]


def make_key_pair(like: HEContext, owner: str) -> tuple[HEContext, bytes]:
    """A fresh key pair with the parameters of `like` (the kit context): (the owner's context, with the
    secret key; its public context as bytes, no secret key, to publish)."""
    ts = _ts()
    parms = like.context.seal_context().data.key_context_data().parms()
    own = ts.context(
        ts.SCHEME_TYPE.CKKS,
        poly_modulus_degree=int(parms.poly_modulus_degree()),
        coeff_mod_bit_sizes=list(COEFF_MOD_BIT_SIZES),
        encryption_type=ts.ENCRYPTION_TYPE.ASYMMETRIC,
    )
    own.global_scale = like.context.global_scale
    if _parms_id(own) != _parms_id(like.context):
        raise HEContextError(
            f"{like.source} has CKKS parameters other than HEBuilder's defaults "
            f"(degree {POLY_MODULUS_DEGREE}, moduli {list(COEFF_MOD_BIT_SIZES)}): per-party keys need those"
        )
    public = own.serialize(save_public_key=True, save_secret_key=False, save_galois_keys=False, save_relin_keys=False)
    return HEContext(own, "client", f"{owner}'s own key", like.slot_count, party_key_id(public)), public


def load_public(data: bytes, like: HEContext, owner: str) -> HEContext:
    """Another party's published public context, checked against `like` (the kit context: same CKKS
    parameters and scale) and refused if it holds a secret key."""
    ts = _ts()
    name = f"{owner}'s public context"
    try:
        context = ts.context_from(bytes(data))
    except Exception as error:
        raise HEContextError(f"{name} is not a TenSEAL context: {error}") from error
    if context.is_private() or not context.has_public_key():
        raise HEContextError(f"{name} must hold a public key and no secret key")
    if _parms_id(context) != _parms_id(like.context) or context.global_scale != like.context.global_scale:
        raise HEContextError(f"{name} has CKKS parameters other than {like.source}'s")
    return HEContext(context, "public", name, like.slot_count, party_key_id(data))


# ------------------------------------------------------------------------------------------ tensors


def encrypt(array: np.ndarray, ctx: HEContext) -> dict:
    """A float tensor of any shape (0-d included) -> encrypted-tensor dict, one ciphertext per slot_count values."""
    if not ctx.can_encrypt:
        raise HEContextError(f"cannot encrypt with {ctx.source}: a server context has no encryption key")
    array = np.asarray(array)
    if not np.issubdtype(array.dtype, np.floating):
        raise TypeError(f"only float tensors are encrypted, got dtype {array.dtype}")
    flat = array.astype(np.float64, copy=False).ravel()
    if not np.all(np.isfinite(flat)):
        raise ValueError("cannot encrypt a tensor holding NaN or infinity")
    ts = _ts()
    n = ctx.slot_count
    chunks = [ts.ckks_vector(ctx.context, flat[i : i + n]).serialize() for i in range(0, flat.size, n)]
    return {
        ENCRYPTED_KEY: True,
        "dtype": array.dtype.str,
        "shape": list(array.shape),
        "chunks": chunks,
        "key": ctx.key_id,
    }


def _check(enc: Any) -> None:
    if not is_encrypted(enc):
        raise TypeError(f"not an encrypted tensor: {type(enc).__name__}")


def decrypt(enc: dict, ctx: HEContext) -> np.ndarray:
    """Encrypted-tensor dict -> the float tensor (its original dtype and shape)."""
    _check(enc)
    if not ctx.can_decrypt:
        raise HEContextError(f"cannot decrypt with {ctx.source}: it holds no secret key (the coordinator never can)")
    if enc.get("key") != ctx.key_id:
        raise HEContextError(
            f"ciphertext made with key {enc.get('key')} but {ctx.source} holds key {ctx.key_id}: all sites must "
            f"share one {CLIENT_CONTEXT_FILE} ({HOW_TO_GET_KEYS})"
        )
    ts = _ts()
    shape = [int(d) for d in enc["shape"]]
    size = int(np.prod(shape, dtype=np.int64))
    parts = [np.asarray(ts.ckks_vector_from(ctx.context, chunk).decrypt(), dtype=np.float64) for chunk in enc["chunks"]]
    flat = np.concatenate(parts) if parts else np.zeros(0)
    if flat.size != size:
        raise ValueError(f"encrypted tensor of shape {shape} decrypted to {flat.size} values")
    return flat.astype(np.dtype(enc["dtype"])).reshape(shape)


def add(encs: list[dict], ctx: HEContext) -> dict:
    """Element-wise sum of encrypted tensors of one shape, without decrypting (the server context is enough)."""
    if not encs:
        raise ValueError("nothing to add")
    for enc in encs:
        _check(enc)
    first = encs[0]
    for enc in encs[1:]:
        if list(enc["shape"]) != list(first["shape"]):
            raise ValueError(f"cannot add encrypted tensors of shapes {first['shape']} and {enc['shape']}")
        if enc.get("key") != first.get("key"):
            raise HEContextError(
                f"cannot add ciphertexts made with different keys ({first.get('key')} and {enc.get('key')}): "
                f"the sites' {CLIENT_CONTEXT_FILE} files differ"
            )
    ts = _ts()
    chunks = []
    for parts in zip(*(enc["chunks"] for enc in encs)):
        total = ts.ckks_vector_from(ctx.context, parts[0])
        for part in parts[1:]:
            total += ts.ckks_vector_from(ctx.context, part)
        chunks.append(total.serialize())
    return {**first, "chunks": chunks}


# ----------------------------------------------------------------------------------------- payloads


def _map(value: Any, on_array, on_encrypted) -> Any:
    if is_encrypted(value):
        return on_encrypted(value)
    if isinstance(value, np.ndarray):
        return on_array(value)
    if isinstance(value, dict):
        return {k: _map(v, on_array, on_encrypted) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_map(v, on_array, on_encrypted) for v in value]
    return value


def encrypt_payload(payload: Payload, ctx: HEContext) -> Payload:
    """Every float array in the payload (at any depth) becomes an encrypted tensor; integer arrays
    (row positions), numbers and strings stay as they are."""
    return _map(
        payload,
        lambda a: encrypt(a, ctx) if np.issubdtype(a.dtype, np.floating) else a,
        lambda e: e,
    )


def decrypt_payload(payload: Payload, ctx: HEContext) -> Payload:
    """Every encrypted tensor in the payload becomes a float array again."""
    return _map(payload, lambda a: a, lambda e: decrypt(e, ctx))


def add_payloads(payloads: list[Payload], ctx: HEContext) -> Payload:
    """Sum of payloads of one structure: encrypted tensors are added under encryption, numbers summed,
    anything else must be equal in all of them. Plaintext float arrays are refused."""
    if not payloads:
        raise ValueError("nothing to add")
    first = payloads[0]
    if is_encrypted(first):
        return add(list(payloads), ctx)
    if isinstance(first, np.ndarray) and np.issubdtype(first.dtype, np.floating):
        raise TypeError("refusing to add plaintext float tensors: secure aggregation takes ciphertexts only")
    if isinstance(first, dict):
        keys = set(first)
        for other in payloads[1:]:
            if set(other) != keys:
                raise ValueError(f"cannot add payloads with different keys: {sorted(keys)} and {sorted(other)}")
        return {k: add_payloads([p[k] for p in payloads], ctx) for k in first}
    if isinstance(first, (list, tuple)):
        if any(len(p) != len(first) for p in payloads):
            raise ValueError("cannot add payloads with lists of different lengths")
        return [add_payloads([p[i] for p in payloads], ctx) for i in range(len(first))]
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return sum(payloads)
    if any(not _equal(p, first) for p in payloads[1:]):
        raise ValueError(f"cannot add payloads that differ in a non-numeric value: {first!r}")
    return first


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    return a == b


def key_ids(payload: Any) -> set[str | None]:
    """The key fingerprints of the encrypted tensors in a payload."""
    found: set[str | None] = set()
    _map(payload, lambda a: a, lambda e: found.add(e.get("key")) or e)
    return found
