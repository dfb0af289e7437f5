"""Image bottom models (models/image.py) through the factory, as an image view builds them."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from vflflare.models.factory import ENCODERS, build_encoder
from vflflare.models.image import SmallCNN, WideResNet, monai_resnet

torch.set_num_threads(1)

# Small settings keep the file fast on CPU; the layouts are the same as the defaults.
SPECS = {
    "cnn": {"name": "cnn", "width": 8},
    "wrn": {"name": "wrn", "depth": 10, "widen_factor": 1},
    "resnet": {"name": "resnet", "layers": [1, 1, 1, 1], "widths": [8, 16, 32, 64]},
}
STRIPS = {
    "mnist-half": (1, 28, 14),
    "mnist-quadrant": (1, 14, 14),
    "cifar-half": (3, 32, 16),
}


def _build(spec: dict, c: int, h: int, w: int, rep_dim: int = 16) -> nn.Module:
    return build_encoder(spec, {"in_channels": c, "image_size": (h, w)}, rep_dim=rep_dim)


@pytest.mark.parametrize("strip", sorted(STRIPS))
@pytest.mark.parametrize("name", sorted(SPECS))
def test_shapes_on_strips(name: str, strip: str) -> None:
    c, h, w = STRIPS[strip]
    torch.manual_seed(0)
    encoder = _build(SPECS[name], c, h, w)
    out = encoder(torch.randn(5, c, h, w))
    assert out.shape == (5, 16)
    assert out.dtype == torch.float32
    out.sum().backward()  # gradients reach the first layer
    first = next(p for p in encoder.parameters() if p.dim() == 4)
    assert first.grad is not None and first.grad.abs().sum() > 0
    encoder.eval()
    with torch.no_grad():
        assert encoder(torch.randn(1, c, h, w)).shape == (1, 16)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_last_layer_is_linear(name: str) -> None:
    """No ReLU after the last layer: some outputs must be negative."""
    torch.manual_seed(0)
    encoder = _build(SPECS[name], 1, 28, 14).eval()
    last = [m for m in encoder.modules() if not list(m.children())][-1]
    assert isinstance(last, nn.Linear)
    with torch.no_grad():
        assert (encoder(torch.randn(8, 1, 28, 14)) < 0).any()


def test_registered_and_settings_introspectable() -> None:
    assert ENCODERS["cnn"] is SmallCNN
    assert ENCODERS["wrn"] is WideResNet
    assert ENCODERS["resnet"] is monai_resnet
    expected = {"cnn": {"width"}, "wrn": {"depth", "widen_factor", "dropout"}, "resnet": {"layers", "widths", "block"}}
    for name, settings in expected.items():
        params = set(inspect.signature(ENCODERS[name]).parameters)
        assert params - {"in_channels", "image_size", "rep_dim"} == settings


@pytest.mark.parametrize("name", sorted(SPECS))
def test_unknown_setting_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match=rf"model '{name}': unknown setting \['hidden'\]"):
        _build({**SPECS[name], "hidden": [64]}, 1, 28, 14)


@pytest.mark.parametrize("depth", [20, 9, 4])
def test_wrn_depth_check(depth: int) -> None:
    with pytest.raises(ValueError, match=rf"depth must be 6n \+ 4 .* got {depth}"):
        _build({"name": "wrn", "depth": depth}, 3, 32, 16)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_too_small_strip_names_the_size(name: str) -> None:
    with pytest.raises(ValueError, match=r"image_size 3x14 .* too small"):
        _build(SPECS[name], 1, 3, 14)


def test_resnet_rejects_bad_layout() -> None:
    with pytest.raises(ValueError, match="layers must be 4"):
        _build({"name": "resnet", "layers": [1, 1, 1]}, 1, 28, 14)
    with pytest.raises(ValueError, match="block must be"):
        _build({"name": "resnet", "block": "dense"}, 1, 28, 14)


def test_wrong_batch_layout_is_named() -> None:
    encoder = _build(SPECS["cnn"], 1, 28, 14)
    with pytest.raises(ValueError, match=r"expected images \[n, 1, H, W\]"):
        encoder(torch.randn(4, 28, 14, 1))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_same_seed_same_outputs(name: str) -> None:
    x = torch.randn(4, 3, 32, 16, generator=torch.Generator().manual_seed(1))
    outs = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        encoder = _build(SPECS[name], 3, 32, 16)
        outs.append(encoder(x).detach())
    assert torch.equal(outs[0], outs[1])
    assert not torch.equal(outs[0], outs[2])


def test_cnn_linear_probe_learns_a_separable_toy() -> None:
    """Bright-left vs bright-right 28x14 strips: a few SGD steps must cut the probe loss well down."""
    g = torch.Generator().manual_seed(0)
    n = 64
    labels = torch.arange(n) % 2
    images = 0.1 * torch.randn(n, 1, 28, 14, generator=g)
    images[labels == 0, :, :, :7] += 1.0
    images[labels == 1, :, :, 7:] += 1.0
    torch.manual_seed(0)
    encoder = _build({"name": "cnn", "width": 16}, 1, 28, 14)  # the default layout at half width, for speed
    probe = nn.Linear(16, 2)
    optimizer = torch.optim.SGD([*encoder.parameters(), *probe.parameters()], lr=0.05, momentum=0.9)
    losses = []
    for _ in range(30):
        loss = nn.functional.cross_entropy(probe(encoder(images)), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
