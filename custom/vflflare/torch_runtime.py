"""Per-process torch setup shared by the coordinator, the sites and the in-process driver."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence

import torch


def site_device(spec: str, who: str) -> torch.device:
    """The torch device of a site's training: `spec` as in JobConfig.device, checked on the site itself
    (the machine that generated the job need not have its GPUs)."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"{who}: device '{spec}' was asked for, but torch sees no CUDA GPU here "
                f"(torch {torch.__version__}); use device 'auto' to fall back to the CPU"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(
                f"{who}: device '{spec}' was asked for, but only {torch.cuda.device_count()} CUDA GPU(s) are visible"
            )
    return device


def prepare_torch(num_threads: int, *, warm_in_background: bool = False, also_import: Sequence[str] = ()) -> None:
    """Limit threads (server and sites share 2 cores here) and pay one-off lazy imports at start-up rather
    than inside a phase: the first optimiser construction imports torch._dynamo (1.4-2.5 s), and
    `also_import` names modules the process will import later (metrics.LAZY_IMPORTS: about 1.2 s).
    warm_in_background: a job process, which after start-up mostly waits (a site for its first tasks, the
    coordinator for the sites) before it trains or scores: the imports run in a thread meanwhile. Code
    that needs a module before they are done waits for it on Python's import lock."""
    torch.set_num_threads(num_threads)

    def warm() -> None:
        torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=0.01)
        for module in also_import:
            importlib.import_module(module)

    if warm_in_background:
        threading.Thread(target=warm, name="vflflare-warm-imports", daemon=True).start()
    else:
        warm()
