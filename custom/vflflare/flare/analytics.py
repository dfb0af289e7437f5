"""Progress of long local phases: a line in the party's log and a TensorBoard scalar streamed through
NVFlare's analytics events to the server's TBAnalyticsReceiver (<run dir>/tb_events/<origin>/).

Firing an NVFlare event costs milliseconds; a training loop must not wait for it, so scalars go
through a queue and one background thread fires the events. `close()` drains the queue."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from nvflare.apis.analytix import AnalyticsDataType
from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_context import FLContext
from nvflare.apis.utils.analytix_utils import create_analytic_dxo, send_analytic_dxo

SITE_EVENT = "fed.analytix_log_stats"  # fired as a federation event: arrives at the server with the site as origin
SERVER_EVENT = "analytix_log_stats"
TRACKING_EVENTS = [SITE_EVENT, SERVER_EVENT]
_STOP = None


class FlareTracker:
    def __init__(
        self, component: FLComponent, fl_ctx: FLContext, on_site: bool, on_progress: Callable[[], None] = lambda: None
    ) -> None:
        """on_progress: called on every report (a site's WorkClock tick, flare/liveness.py)."""
        self.component = component
        self.on_progress = on_progress
        self.engine = fl_ctx.get_engine()
        self.on_site = on_site
        self._queue: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._send_all, name="vflflare-tracker", daemon=True)
        self._worker.start()

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.on_progress()
        self._queue.put((tag, float(value), int(step)))

    def info(self, message: str) -> None:
        self.on_progress()
        with self.engine.new_context() as fl_ctx:
            self.component.log_info(fl_ctx, message)

    def close(self, timeout: float = 30.0) -> None:
        self._queue.put(_STOP)
        self._worker.join(timeout)

    def _send_all(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            tag, value, step = item
            dxo = create_analytic_dxo(tag=tag, value=value, data_type=AnalyticsDataType.SCALAR, global_step=step)
            with self.engine.new_context() as fl_ctx:
                # the curves go to TensorBoard; the log keeps the progress lines (tracking.Progress)
                self.component.log_debug(fl_ctx, f"{tag} [{step}] {value:.5f}")
                if self.on_site:
                    send_analytic_dxo(self.component, dxo, fl_ctx, SITE_EVENT, fire_fed_event=True)
                else:
                    send_analytic_dxo(self.component, dxo, fl_ctx, SERVER_EVENT)
