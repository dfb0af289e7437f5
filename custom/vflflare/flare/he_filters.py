"""CKKS encryption of vflflare payloads as NVFlare Filters, and where the keys come from.

Keys live in each participant's startup kit, as NVFlare provisions them:
- a site's `<site workspace>/startup/client_context.tenseal` (HEBuilder / `nvflare poc prepare -he`);
- the server's `<server workspace>/startup/server_context.tenseal` (no secret key).
In the simulator, `vflflare he-keys -w WORKSPACE` writes both into `WORKSPACE/startup/` before the run
and NVFlare copies that folder into every participant's startup kit. Where NVFlare manages the kit's
content (signed HE kits of a provisioned project or POC), the file is read through its
SecurityContentService, so a tampered context is refused.

Filters (the job generator adds them to config_fed_client.json when `he: true`):
- `EncryptTaskResult`: a site's task result filter; every float tensor of the result becomes a ciphertext.
- `DecryptTaskData`: a site's task data filter; every ciphertext of the task data becomes a float tensor.
Filters do not run on per-batch steps (flare/messages.py): the executor applies the same codec to them.

With the labels on a site, each site also holds its own key pair for the job (vflflare.privacy.he_keys:
made by `make_party_keys` at task KEYGEN_TASK, completed by `register_party_keys` at KEYS_TASK, in this
process's memory only) and `encrypt_for` / `decrypt_for` encrypt for the receiver and decrypt with it.
"""

from __future__ import annotations

import os
import threading

from nvflare.apis.filter import Filter
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import ReservedHeaderKey, Shareable
from nvflare.fuel.sec.security_content_service import LoadResult, SecurityContentService

from vflflare import wire
from vflflare.flare.messages import PAYLOAD_KEY, error_reply
from vflflare.privacy import ckks
from vflflare.privacy.he_keys import PartyKeys
from vflflare.protocol.payload import tensor_kinds

_cache: dict[str, ckks.HEContext] = {}
_lock = threading.Lock()
# per-party keys, by (job id, site): the key pair made at KEYGEN_TASK, then the PartyKeys of KEYS_TASK
_own: dict[tuple, ckks.HEContext] = {}
_party: dict[tuple, PartyKeys] = {}


def startup_dir(fl_ctx: FLContext) -> str:
    return fl_ctx.get_engine().get_workspace().get_startup_kit_dir()


def _read(path: str, fl_ctx: FLContext) -> bytes | None:
    """The file's bytes, through NVFlare's SecurityContentService when it manages this startup kit."""
    manager = SecurityContentService.security_content_manager
    folder = os.path.dirname(path)
    if manager is not None and os.path.realpath(manager.content_folder) == os.path.realpath(folder):
        data, rc = SecurityContentService.load_content(os.path.basename(path))
        if rc in (LoadResult.NO_SUCH_CONTENT, LoadResult.INVALID_CONTENT):
            return None
        if rc == LoadResult.INVALID_SIGNATURE or (
            fl_ctx.get_prop(FLContextKey.SECURE_MODE, False) and rc != LoadResult.OK
        ):
            raise ckks.HEContextError(f"HE context {path} failed the startup kit's signature check: {rc.value}")
        return data
    return open(path, "rb").read() if os.path.isfile(path) else None


def workspace_context(fl_ctx: FLContext, role: str) -> ckks.HEContext:
    """The participant's context from its startup kit: role 'client' on a site, 'server' on the coordinator.
    Loaded once per process. A missing or wrong file raises HEContextError naming the expected path."""
    path = os.path.join(startup_dir(fl_ctx), ckks.CONTEXT_FILES[role])
    with _lock:
        if path not in _cache:
            data = _read(path, fl_ctx)
            if data is None:
                raise ckks.HEContextError(f"HE is on (he: true) but {path} is missing ({ckks.HOW_TO_GET_KEYS})")
            _cache[path] = ckks.load_context(data, role, name=path)
        return _cache[path]


def _slot(fl_ctx: FLContext) -> tuple:
    return fl_ctx.get_job_id(), fl_ctx.get_identity_name()


def make_party_keys(fl_ctx: FLContext) -> bytes:
    """This site's fresh key pair for the job (the kit context's parameters); returns its public context."""
    own, public = ckks.make_key_pair(workspace_context(fl_ctx, "client"), fl_ctx.get_identity_name())
    with _lock:
        _own[_slot(fl_ctx)] = own
    return public


def register_party_keys(
    fl_ctx: FLContext, public_contexts: dict[str, bytes], label_owner: str, sites: list[str]
) -> None:
    """The public contexts this site encrypts with, each checked against the kit context's parameters."""
    site, kit = fl_ctx.get_identity_name(), workspace_context(fl_ctx, "client")
    with _lock:
        own = _own.get(_slot(fl_ctx))
    if own is None:
        raise ckks.HEContextError(f"site '{site}' got the job's public keys before making its own key pair")
    public = {s: ckks.load_public(data, kit, f"site '{s}'") for s, data in public_contexts.items() if s != site}
    if site in public_contexts and ckks.party_key_id(public_contexts[site]) != own.key_id:
        raise ckks.HEContextError(
            f"site '{site}': the coordinator relayed a public key as this site's that is not its own"
        )
    with _lock:
        _party[_slot(fl_ctx)] = PartyKeys(site, label_owner, list(sites), own, kit, public)


def party_keys(fl_ctx: FLContext) -> PartyKeys | None:
    with _lock:
        return _party.get(_slot(fl_ctx))


def forget_party_keys(fl_ctx: FLContext) -> None:
    """At the end of the job: its secret keys go with it."""
    with _lock:
        _own.pop(_slot(fl_ctx), None)
        _party.pop(_slot(fl_ctx), None)


def encrypt_for(fl_ctx: FLContext, task: str | None, payload):
    """This site's reply to `task` with every float tensor encrypted: for its receiver with per-party keys,
    else (labels at the coordinator: secure aggregation only) with the kit's shared key."""
    keys = party_keys(fl_ctx)
    if keys is not None:
        return keys.encrypt(task or "", payload)
    return ckks.encrypt_payload(payload, workspace_context(fl_ctx, "client"))


def decrypt_for(fl_ctx: FLContext, payload):
    keys = party_keys(fl_ctx)
    if keys is not None:
        return keys.decrypt(payload)
    return ckks.decrypt_payload(payload, workspace_context(fl_ctx, "client"))


def _task_of(shareable: Shareable, fl_ctx: FLContext) -> str | None:
    return shareable.get_header(ReservedHeaderKey.TASK_NAME) or fl_ctx.get_prop(FLContextKey.TASK_NAME)


def _convert(filter_: Filter, shareable: Shareable, fl_ctx: FLContext, needed, convert) -> Shareable:
    """Apply `convert(payload, context)` to the vflflare payload, loading the context only when the payload
    has something to convert (`needed`), so error replies and control-only messages pass untouched.
    A failure becomes a vflflare error (header ERROR_HEADER) with a clear message, instead of NVFlare's bare
    filter-error return code: on a result it is the reply; on task data the executor answers with it."""
    data = shareable.get(PAYLOAD_KEY)
    if not data:
        return shareable
    try:
        payload = wire.loads(data)
        if needed(tensor_kinds(payload)):
            shareable[PAYLOAD_KEY] = wire.dumps(convert(payload, fl_ctx, _task_of(shareable, fl_ctx)))
        return shareable
    except Exception as error:
        message = f"{type(filter_).__name__} on {fl_ctx.get_identity_name()}: {type(error).__name__}: {error}"
        filter_.log_error(fl_ctx, message, fire_event=False)
        return error_reply(message)


class EncryptTaskResult(Filter):
    """Site task_result_filter: every float tensor of a vflflare result leaves the site as a ciphertext."""

    def process(self, shareable: Shareable, fl_ctx: FLContext) -> Shareable:
        return _convert(
            self,
            shareable,
            fl_ctx,
            lambda kinds: kinds["plaintext"] > 0,
            lambda payload, ctx, task: encrypt_for(ctx, task, payload),
        )


class DecryptTaskData(Filter):
    """Site task_data_filter: the ciphertexts of a vflflare task become float tensors again on the site."""

    def process(self, shareable: Shareable, fl_ctx: FLContext) -> Shareable:
        return _convert(
            self,
            shareable,
            fl_ctx,
            lambda kinds: kinds["encrypted"] > 0,
            lambda payload, ctx, task: decrypt_for(ctx, payload),
        )


def client_filters(tasks: list[str]) -> dict[str, list]:
    """The config_fed_client.json entries that turn HE on for these tasks (NVFlare matches filter
    chains by exact task name: no wildcard)."""
    module = __name__
    return {
        "task_data_filters": [{"tasks": list(tasks), "filters": [{"path": f"{module}.DecryptTaskData", "args": {}}]}],
        "task_result_filters": [
            {"tasks": list(tasks), "filters": [{"path": f"{module}.EncryptTaskResult", "args": {}}]}
        ],
    }
