"""Bottom models f_k by name, from the job config's `model: {name: ..., <builder arguments>}`.

A builder takes the view's input description (what the data looks like at this site) as keyword
arguments, then the model's own settings from the config, and returns a module whose forward takes
the view's batch fields (`encoder(*batch)`) and returns [n, rep_dim] representations.

Table views take the MLP ("mlp"); image views (inputs `in_channels`, `image_size`) take one of the
image encoders of models/image.py: "cnn" (small CNN, MNIST strips and CI), "wrn" (WideResNet-28-2,
CIFAR-10) or "resnet" (MONAI's 2-D ResNet, bring-your-own images).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

from vflflare.models.image import SmallCNN, WideResNet, monai_resnet
from vflflare.models.tabular import TabularEncoder

ENCODERS: dict[str, Callable[..., nn.Module]] = {
    "mlp": TabularEncoder,  # inputs: numeric_dim, cardinalities; settings: hidden
    "cnn": SmallCNN,  # inputs: in_channels, image_size; settings: width
    "wrn": WideResNet,  # inputs: in_channels, image_size; settings: depth, widen_factor, dropout
    "resnet": monai_resnet,  # inputs: in_channels, image_size; settings: layers, widths, block
}


def build_encoder(spec: dict[str, Any], inputs: dict[str, Any], rep_dim: int) -> nn.Module:
    settings = {k: v for k, v in spec.items() if k != "name"}
    name = spec.get("name")
    if name not in ENCODERS:
        raise ValueError(f"model: unknown name {name!r}; registered models: {sorted(ENCODERS)}")
    builder = ENCODERS[name]
    accepted = set(inspect.signature(builder).parameters) - set(inputs) - {"rep_dim"}
    unknown = sorted(set(settings) - accepted)
    if unknown:
        raise ValueError(f"model '{name}': unknown setting {unknown}; it takes {sorted(accepted)}")
    return builder(**inputs, **settings, rep_dim=rep_dim)
