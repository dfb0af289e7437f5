"""How a Payload rides in an NVFlare Shareable (tasks and aux messages alike)."""
from __future__ import annotations

from nvflare.apis.fl_constant import ReturnCode
from nvflare.apis.shareable import Shareable, make_reply

from vflflare import wire
from vflflare.protocol.payload import Payload

PAYLOAD_KEY = "vflflare_payload"
TASK_HEADER = "vflflare_task"
ERROR_HEADER = "vflflare_error"
AUX_TOPIC = "vflflare.step"
# a liveness probe: the executor answers it with an empty OK reply (flare/site_health.py says why)
PING_TOPIC = "vflflare.ping"
# what NVFlare returns for an aux request whose target's job cell does not exist (any more): the
# request was never delivered, so the site cannot have answered it
UNREACHABLE_CODES = frozenset({ReturnCode.COMMUNICATION_ERROR, ReturnCode.ERROR})


def to_shareable(data: bytes, task: str | None = None) -> Shareable:
    shareable = Shareable()
    shareable[PAYLOAD_KEY] = data
    if task is not None:
        shareable.set_header(TASK_HEADER, task)
    return shareable


def payload_bytes_of(shareable: Shareable) -> bytes:
    return shareable.get(PAYLOAD_KEY, b"")


def from_shareable(shareable: Shareable) -> Payload:
    data = payload_bytes_of(shareable)
    return wire.loads(data) if data else {}


def error_reply(message: str) -> Shareable:
    reply = make_reply(ReturnCode.EXECUTION_EXCEPTION)
    reply.set_header(ERROR_HEADER, message)
    return reply


def error_of(reply: Shareable | None) -> str | None:
    """The site's own error message, or a description of why there is no usable reply."""
    if reply is None:
        return "no reply"
    code = reply.get_return_code(ReturnCode.OK)
    if code == ReturnCode.OK:
        return None
    return reply.get_header(ERROR_HEADER) or f"return code {code}"
