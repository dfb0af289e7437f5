"""Site side of every vflflare job: one executor answers phase tasks and per-batch aux requests by
handing them to the site's SiteRuntime. Raw features never leave SiteRuntime."""
from __future__ import annotations

import traceback

from vflflare.torch_runtime import prepare_torch
from nvflare.apis.event_type import EventType
from nvflare.apis.executor import Executor
from nvflare.apis.fl_context import FLContext
from nvflare.apis.shareable import Shareable
from nvflare.apis.signal import Signal

from vflflare import wire
from vflflare.algorithms.payload import Payload, encode
from vflflare.algorithms.site_runtime import SiteRuntime
from vflflare.data.loading import resolve_data_root
from vflflare.flare.messages import AUX_TOPIC, TASK_HEADER, error_reply, from_shareable, to_shareable
from vflflare.flare.tracking import FlareTracker


class VFLExecutor(Executor):
    def __init__(self, data_root: str | None = None, num_threads: int = 1) -> None:
        """data_root overrides VFLFLARE_DATA_ROOT for this site; unset both for the embedded default."""
        super().__init__()
        self.data_root = data_root
        self.num_threads = num_threads
        self.runtime: SiteRuntime | None = None
        self.tracker: FlareTracker | None = None

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        if event_type == EventType.START_RUN:
            prepare_torch(self.num_threads)
            site = fl_ctx.get_identity_name()
            self.tracker = FlareTracker(self, fl_ctx, on_site=True)
            self.runtime = SiteRuntime(site, self.data_root or resolve_data_root(), self.tracker)
            fl_ctx.get_engine().register_aux_message_handler(AUX_TOPIC, self._on_step)
        elif event_type == EventType.END_RUN and self.tracker is not None:
            self.tracker.close()

    def _run(self, task: str, payload: Payload, fl_ctx: FLContext) -> Shareable:
        try:
            return to_shareable(wire.dumps(encode(self.runtime.handle(task, payload), self.runtime.fp16)))
        except Exception as error:
            message = f"{type(error).__name__}: {error}"
            self.log_error(fl_ctx, f"task '{task}' failed: {message}\n{traceback.format_exc()}")
            return error_reply(message)

    def execute(self, task_name: str, shareable: Shareable, fl_ctx: FLContext, abort_signal: Signal) -> Shareable:
        return self._run(task_name, from_shareable(shareable), fl_ctx)

    def _on_step(self, topic: str, request: Shareable, fl_ctx: FLContext) -> Shareable:
        return self._run(request.get_header(TASK_HEADER), from_shareable(request), fl_ctx)
