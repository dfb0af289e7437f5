"""Progress of long local phases: a line in the site's log and a TensorBoard scalar streamed through
NVFlare's analytics events to the server's TBAnalyticsReceiver (<run dir>/tb_events/<site>/)."""
from __future__ import annotations

from nvflare.apis.analytix import AnalyticsDataType
from nvflare.apis.fl_component import FLComponent
from nvflare.apis.fl_context import FLContext
from nvflare.apis.utils.analytix_utils import create_analytic_dxo, send_analytic_dxo

SITE_EVENT = "fed.analytix_log_stats"  # fired as a federation event: arrives at the server with the site as origin
SERVER_EVENT = "analytix_log_stats"
TRACKING_EVENTS = [SITE_EVENT, SERVER_EVENT]


class FlareTracker:
    def __init__(self, component: FLComponent, fl_ctx: FLContext, on_site: bool) -> None:
        self.component = component
        self.engine = fl_ctx.get_engine()
        self.on_site = on_site

    def scalar(self, tag: str, value: float, step: int) -> None:
        dxo = create_analytic_dxo(tag=tag, value=float(value), data_type=AnalyticsDataType.SCALAR, global_step=int(step))
        with self.engine.new_context() as fl_ctx:
            self.component.log_info(fl_ctx, f"{tag} [{step}] {float(value):.5f}")
            if self.on_site:
                send_analytic_dxo(self.component, dxo, fl_ctx, SITE_EVENT, fire_fed_event=True)
            else:
                send_analytic_dxo(self.component, dxo, fl_ctx, SERVER_EVENT)

    def info(self, message: str) -> None:
        with self.engine.new_context() as fl_ctx:
            self.component.log_info(fl_ctx, message)
