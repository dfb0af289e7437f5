"""A FedHSSL party's two towers (He et al., Fig. 4): the cross-party encoder f_c and the local encoder f_l,
both built by the model factory from the site's `model` / `image_model`, so they exist for tables and
images alike. The local encoder splits into a private bottom f_lb and a shareable top f_lt (Table III:
the top layer of an MLP, the top blocks of a ResNet), named by `top_layers`."""

from __future__ import annotations

import torch
from torch import nn

TOWERS = ("cross", "local")


class TwoTower(nn.Module):
    """The bottom model a FedHSSL party finetunes: the outputs of the chosen towers side by side
    (f_c and f_l for FedHSSL and FedGSSL; f_l alone for FedGSSL*, the local-SSL baselines and FedSplitNN;
    f_c alone for FedCSSL)."""

    def __init__(self, cross: nn.Module, local: nn.Module, towers: tuple[str, ...] = TOWERS) -> None:
        super().__init__()
        if not towers or set(towers) - set(TOWERS) or len(set(towers)) != len(towers):
            raise ValueError(f"towers must be distinct names among {TOWERS}, got {towers}")
        self.cross, self.local, self.towers = cross, local, tuple(towers)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return torch.cat([getattr(self, tower)(*inputs) for tower in self.towers], dim=1)


def top_layers(module: nn.Module, count: int) -> list[str]:
    """Names of the last `count` modules of `module` that hold parameters themselves (Linear, Conv,
    BatchNorm, ...), in the order they were built: f_lt, the part of f_l that PMA shares."""
    holders = [name for name, m in module.named_modules() if name and any(True for _ in m.parameters(recurse=False))]
    if not 1 <= count <= len(holders):
        raise ValueError(
            f"the local top encoder needs 1..{len(holders)} layers of {type(module).__name__}, got {count}"
        )
    return holders[-count:]
