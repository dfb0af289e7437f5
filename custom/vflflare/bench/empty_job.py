"""NVFlare's floor: a job of the same shape as a vflflare job (a server and the same sites, run by the same
simulator command) whose controller sends every site one task that does nothing. What a vflflare job
takes beyond this is vflflare's own cost (the performance suite's overhead part). Only NVFlare is imported
here, so the job's processes import nothing of vflflare's but this module."""

from __future__ import annotations

from pathlib import Path

from nvflare.apis.executor import Executor
from nvflare.apis.fl_constant import ReturnCode
from nvflare.apis.fl_context import FLContext
from nvflare.apis.impl.controller import Controller, Task
from nvflare.apis.shareable import Shareable, make_reply
from nvflare.apis.signal import Signal

TASK = "noop"


class OneEmptyRound(Controller):
    """Broadcast one empty task and wait for every site's empty reply."""

    def __init__(self, sites: int) -> None:
        super().__init__()
        self.sites = sites

    def start_controller(self, fl_ctx: FLContext) -> None:
        pass

    def control_flow(self, abort_signal: Signal, fl_ctx: FLContext) -> None:
        self.broadcast_and_wait(Task(TASK, Shareable()), fl_ctx, min_responses=self.sites, abort_signal=abort_signal)

    def stop_controller(self, fl_ctx: FLContext) -> None:
        pass

    def process_result_of_unknown_task(self, client, task_name, client_task_id, result, fl_ctx) -> None:  # noqa: ANN001
        pass


class Nothing(Executor):
    def execute(self, task_name: str, shareable: Shareable, fl_ctx: FLContext, abort_signal: Signal) -> Shareable:
        return make_reply(ReturnCode.OK)


def write_empty_job(folder: Path, sites: int = 2) -> Path:
    """The empty job's folder under `folder`, for `nvflare simulator ... -n sites`."""
    from nvflare.job_config.api import FedJob

    job = FedJob(name="empty", min_clients=sites)
    job.to_server(OneEmptyRound(sites))
    job.to_clients(Nothing(), tasks=[TASK])
    job.export_job(str(folder))
    return folder / "empty"
