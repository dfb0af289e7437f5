"""Per-process torch setup shared by the coordinator, the sites and the in-process driver."""
from __future__ import annotations

import torch


def prepare_torch(num_threads: int) -> None:
    """Limit threads (server and sites share 2 cores here) and pay torch's one-off lazy imports
    (the first optimiser construction takes over a second) at start-up rather than inside a phase."""
    torch.set_num_threads(num_threads)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=0.01)
