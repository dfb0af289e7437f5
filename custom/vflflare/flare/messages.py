"""How a Payload rides in NVFlare messages: a Shareable for a phase task or a liveness probe (an aux
request), a cellnet Message for a per-batch step.

Steps are cellnet requests from the server's job cell straight to a site's job cell, on
STEP_CHANNEL: raw bytes each way. An NVFlare aux request would wrap them in an FL-context envelope
(the sender's public context props, serialised with every message) and move them as a byte-stream
transaction (on all channels but a few system ones); that doubled the round trip of a split-NN step
in a POC (benchmarks/SCALE_REPORT.md). Task filters run on neither, so with `he` the executor
encrypts a step's reply itself."""

from __future__ import annotations

from nvflare.apis.fl_constant import ReturnCode
from nvflare.apis.shareable import Shareable, make_reply
from nvflare.fuel.f3.cellnet.defs import MessageHeaderKey
from nvflare.fuel.f3.cellnet.defs import ReturnCode as CellReturnCode
from nvflare.fuel.f3.cellnet.utils import make_reply as make_cell_reply
from nvflare.fuel.f3.message import Message

from vflflare import wire
from vflflare.protocol.payload import Payload

PAYLOAD_KEY = "vflflare_payload"
TASK_HEADER = "vflflare_task"
ERROR_HEADER = "vflflare_error"
MODEL_HEADER = "vflflare_model_id"  # the ID a site saves the run's model under (FlareTransport.announce_model)
STEP_CHANNEL = "vflflare"
STEP_TOPIC = "step"
# the coordinator's last request of a job that trains a model: save it now, so that a job NVFlare reports
# finished has every party's model on disk (a site's END_RUN can come after the server's job has ended)
SAVE_MODEL_TASK = "save_model"
# a liveness probe, an aux request: the executor answers it with its WorkClock report (flare/liveness.py)
PING_TOPIC = "vflflare.ping"
# what NVFlare returns for a request whose target's job cell does not exist (any more): it was never
# delivered, so the site cannot have answered it
UNREACHABLE_CODES = frozenset({ReturnCode.COMMUNICATION_ERROR, ReturnCode.ERROR})


def to_shareable(data: bytes) -> Shareable:
    shareable = Shareable()
    shareable[PAYLOAD_KEY] = data
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


# ---------------------------------------------------------------- per-batch steps
def step_request(data: bytes, task: str) -> Message:
    return Message({TASK_HEADER: task}, data)


def step_reply(reply: Shareable) -> Message:
    """The executor's Shareable reply as a cell reply (its error header carried over)."""
    code = reply.get_return_code(ReturnCode.OK)
    if code == ReturnCode.OK:
        return make_cell_reply(CellReturnCode.OK, body=payload_bytes_of(reply))
    message = make_cell_reply(CellReturnCode.PROCESS_EXCEPTION)
    message.set_header(ERROR_HEADER, reply.get_header(ERROR_HEADER) or f"return code {code}")
    return message


_CELL_CODES = {
    CellReturnCode.COMM_ERROR: ReturnCode.COMMUNICATION_ERROR,
    CellReturnCode.TARGET_UNREACHABLE: ReturnCode.COMMUNICATION_ERROR,
    CellReturnCode.INVALID_TARGET: ReturnCode.COMMUNICATION_ERROR,
    CellReturnCode.TIMEOUT: ReturnCode.TIMEOUT,
}


def shareable_of(message: Message | None) -> Shareable | None:
    """A cell reply as the Shareable the transport reads (return code, error, payload)."""
    if message is None:
        return None
    code = message.get_header(MessageHeaderKey.RETURN_CODE, CellReturnCode.OK)
    if code == CellReturnCode.OK:
        return to_shareable(message.payload or b"")
    reply = make_reply(_CELL_CODES.get(code, ReturnCode.EXECUTION_EXCEPTION))
    reply.set_header(
        ERROR_HEADER,
        message.get_header(ERROR_HEADER) or message.get_header(MessageHeaderKey.ERROR) or f"cell return code {code}",
    )
    return reply
