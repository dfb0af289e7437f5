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
"""
from __future__ import annotations

import os
import threading

from nvflare.apis.filter import Filter
from nvflare.apis.fl_constant import FLContextKey
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable
from nvflare.fuel.sec.security_content_service import LoadResult, SecurityContentService

from vflflare import wire
from vflflare.protocol.payload import tensor_kinds
from vflflare.flare.messages import PAYLOAD_KEY, error_reply
from vflflare.privacy import ckks

_cache: dict[str, ckks.HEContext] = {}
_lock = threading.Lock()


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
                raise ckks.HEContextError(
                    f"HE is on (he: true) but {path} is missing ({ckks.HOW_TO_GET_KEYS})"
                )
            _cache[path] = ckks.load_context(data, role, name=path)
        return _cache[path]


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
            shareable[PAYLOAD_KEY] = wire.dumps(convert(payload, workspace_context(fl_ctx, "client")))
        return shareable
    except Exception as error:
        message = f"{type(filter_).__name__} on {fl_ctx.get_identity_name()}: {type(error).__name__}: {error}"
        filter_.log_error(fl_ctx, message, fire_event=False)
        return error_reply(message)


class EncryptTaskResult(Filter):
    """Site task_result_filter: every float tensor of a vflflare result leaves the site as a ciphertext."""

    def process(self, shareable: Shareable, fl_ctx: FLContext) -> Shareable:
        return _convert(self, shareable, fl_ctx, lambda kinds: kinds["plaintext"] > 0, ckks.encrypt_payload)


class DecryptTaskData(Filter):
    """Site task_data_filter: the ciphertexts of a vflflare task become float tensors again on the site."""

    def process(self, shareable: Shareable, fl_ctx: FLContext) -> Shareable:
        return _convert(self, shareable, fl_ctx, lambda kinds: kinds["encrypted"] > 0, ckks.decrypt_payload)


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
