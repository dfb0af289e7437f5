"""MoCo (He et al., CVPR 2020) as in FedHSSL (He et al.), Eq. 2:

    L_MoCo = -log exp(z1 . st(z~2) / tau) / (exp(z1 . st(z~2) / tau) + sum_(z~q in Q) exp(z1 . st(z~q) / tau))

z1 = f(v1) from the online encoder (the query q), z~2 = f~(v2) from its momentum copy (the key k), Q a FIFO
queue of past keys; all vectors are L2-normalised (cosine similarity). FedHSSL's defaults: tau = 0.5,
|Q| = 4096, target momentum 0.99.

The loss does not touch the queue: call `enqueue(k)` after the optimiser step (a symmetric loss calls
forward twice and enqueues both key batches). The queue starts as random unit vectors (MoCo's own
initialisation) drawn from a fixed seed, so it does not consume the caller's RNG.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

MOCO_MOMENTUM = 0.99


class MoCoLoss(nn.Module):
    queue: torch.Tensor
    pointer: torch.Tensor

    def __init__(self, temperature: float = 0.5, queue_size: int = 4096, dim: int = 128, seed: int = 0) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if queue_size < 1 or dim < 1:
            raise ValueError(f"queue_size and dim must be >= 1, got {queue_size} and {dim}")
        self.temperature = temperature
        generator = torch.Generator().manual_seed(seed)
        self.register_buffer("queue", F.normalize(torch.randn(queue_size, dim, generator=generator), dim=1))
        self.register_buffer("pointer", torch.zeros((), dtype=torch.int64))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        if q.shape != k.shape or q.shape[-1] != self.queue.shape[1]:
            raise ValueError(f"q and k must be [n, {self.queue.shape[1]}], got {tuple(q.shape)} and {tuple(k.shape)}")
        q, k = F.normalize(q, dim=1), F.normalize(k.detach(), dim=1)
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ self.queue.detach().T], dim=1) / self.temperature
        return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.int64, device=q.device))

    @torch.no_grad()
    def enqueue(self, k: torch.Tensor) -> None:
        """Push the (normalised, detached) keys into the queue, overwriting the oldest entries."""
        k = F.normalize(k.detach(), dim=1)[-len(self.queue) :]
        slots = (self.pointer + torch.arange(len(k), device=k.device)) % len(self.queue)
        self.queue[slots] = k.to(self.queue.dtype)
        self.pointer.copy_((self.pointer + len(k)) % len(self.queue))


@torch.no_grad()
def momentum_update(online: nn.Module, target: nn.Module, momentum: float = MOCO_MOMENTUM) -> None:
    """theta~ <- m theta~ + (1 - m) theta for every parameter; buffers (e.g. BatchNorm statistics) are copied.
    MoCo uses m = 0.99 in FedHSSL, BYOL 0.995 (byol.BYOL_MOMENTUM)."""
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    online_params, target_params = list(online.parameters()), list(target.parameters())
    if len(online_params) != len(target_params):
        raise ValueError("online and target modules must have the same parameters")
    for p_target, p_online in zip(target_params, online_params):
        p_target.mul_(momentum).add_(p_online.detach(), alpha=1.0 - momentum)
    for b_target, b_online in zip(target.buffers(), online.buffers()):
        b_target.copy_(b_online)


def target_copy(online: nn.Module) -> nn.Module:
    """A frozen deep copy of `online` to serve as the momentum (target) encoder."""
    target = copy.deepcopy(online)
    for p in target.parameters():
        p.requires_grad_(False)
    return target
