"""Image networks: the bottom model f_k of a feature party holding an image strip.

Models only; the training loops live in ssl/ and algorithms/. Each builder takes the view's inputs
(`in_channels`, `image_size` = (height, width) of this site's strip), then its own settings, then
`rep_dim`; its forward takes one float32 tensor `images` [n, in_channels, H, W] and returns
[n, rep_dim]. The last layer is linear: the representations feed linear heads and the SDPA estimate
(Eq. 10), and a final ReLU would zero whole dimensions for some rows.

Which model for which data (`model: {name: ...}` in the job config):

    name     model                                   suits
    -------  --------------------------------------  ---------------------------------------------
    cnn      SmallCNN (3 conv layers, width 32)      MNIST halves/quadrants, CI, quick checks
    wrn      WideResNet (WRN-28-2 by default)        CIFAR-10 strips, the paper-scale table
    resnet   monai_resnet (MONAI ResNet-18 layout)   bring-your-own images (e.g. medical strips)

Which model each benchmark uses:

    bench suite images, CPU scale           cnn, width 16 (2.6x faster than 32; IMAGES_REPORT.md says why)
    bench suite images, paper scale         wrn, depth 28, widen_factor 2 (FixMatch's CIFAR-10 backbone)
    bench suite images_simulator            cnn, width 32 (the default), small runs and all of MNIST
    tests (test_image_jobs, test_poc)       cnn, width 32
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

# SmallCNN's two 2x2 max pools need 4 px per side to leave one pixel; the residual nets' strided 3x3
# convs (padding 1) never go below one pixel, and a side under 4 px carries no spatial structure anyway.
MIN_SIDE = 4


def _check_inputs(model: str, in_channels: int, image_size: Sequence[int], rep_dim: int) -> tuple[int, int]:
    """Fail at build time, naming the size, rather than deep inside a conv on the first batch."""
    if in_channels < 1:
        raise ValueError(f"{model}: in_channels must be >= 1, got {in_channels}")
    if rep_dim < 1:
        raise ValueError(f"{model}: rep_dim must be >= 1, got {rep_dim}")
    size = [int(s) for s in image_size]
    if len(size) != 2:
        raise ValueError(f"{model}: image_size must be (height, width), got {tuple(image_size)}")
    height, width = size
    if min(height, width) < MIN_SIDE:
        raise ValueError(
            f"{model}: image_size {height}x{width} (height x width) is too small; both sides must be >= {MIN_SIDE} px"
        )
    return height, width


def _check_images(model: str, in_channels: int, images: torch.Tensor) -> None:
    """A wrong batch layout (channel-last, missing batch axis) otherwise surfaces as an opaque conv error."""
    if images.dim() != 4 or images.shape[1] != in_channels:
        raise ValueError(f"{model}: expected images [n, {in_channels}, H, W], got {list(images.shape)}")


class SmallCNN(nn.Module):
    """A three-layer CNN, fast on CPU: the default for MNIST strips (as small as 14x14) and for CI,
    where a deep network would only add time. Global average pooling makes it size-agnostic."""

    def __init__(self, in_channels: int, image_size: tuple[int, int], width: int = 32, rep_dim: int = 32) -> None:
        super().__init__()
        self.image_size = _check_inputs("SmallCNN", in_channels, image_size, rep_dim)
        if width < 1:
            raise ValueError(f"SmallCNN: width must be >= 1, got {width}")
        self.in_channels, self.rep_dim = in_channels, rep_dim

        def block(a: int, b: int) -> list[nn.Module]:
            return [nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(
            *block(in_channels, width),
            nn.MaxPool2d(2),
            *block(width, 2 * width),
            nn.MaxPool2d(2),
            *block(2 * width, 2 * width),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.fc = nn.Linear(2 * width, rep_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _check_images("SmallCNN", self.in_channels, images)
        return self.fc(self.features(images))


class _PreActBlock(nn.Module):
    """BN-ReLU-conv twice, with the shortcut taken after the first BN-ReLU when the shape changes
    (as in the WRN paper), so the identity path stays clean otherwise."""

    def __init__(self, in_planes: int, planes: int, stride: int, dropout: float, momentum: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes, momentum=momentum)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes, momentum=momentum)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.shortcut = (
            nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False) if stride != 1 or in_planes != planes else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.relu(self.bn1(x))
        skip = x if self.shortcut is None else self.shortcut(pre)
        out = self.conv1(pre)
        out = self.conv2(self.dropout(self.relu(self.bn2(out))))
        return out + skip


class WideResNet(nn.Module):
    """WRN-depth-k (Zagoruyko & Komodakis, 2016), the CIFAR-10 backbone for the paper-scale table.

    The one-shot VFL paper ("Hyperparameter Configurations") names "WideResNet20", which is not a
    valid WRN depth: a WRN has 6n + 4 layers. We default to WRN-28-2, FixMatch's CIFAR-10 backbone,
    since the paper's semi-supervised step is FixMatch. Pre-activation basic blocks, three groups of
    (depth - 4) / 6 blocks with widths 16k, 32k, 64k and strides 1, 2, 2, then BN-ReLU, global
    average pooling and a linear layer to rep_dim. BatchNorm keeps PyTorch's momentum (0.1) rather
    than FixMatch's 0.001: federated runs are short, and evaluation uses the running statistics.
    """

    def __init__(
        self,
        in_channels: int,
        image_size: tuple[int, int],
        depth: int = 28,
        widen_factor: int = 2,
        dropout: float = 0.0,
        rep_dim: int = 32,
    ) -> None:
        super().__init__()
        self.image_size = _check_inputs("WideResNet", in_channels, image_size, rep_dim)
        if depth < 10 or (depth - 4) % 6 != 0:
            raise ValueError(f"WideResNet: depth must be 6n + 4 with n >= 1 (10, 16, 22, 28, 40, ...), got {depth}")
        if widen_factor < 1:
            raise ValueError(f"WideResNet: widen_factor must be >= 1, got {widen_factor}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"WideResNet: dropout must be in [0, 1), got {dropout}")
        self.in_channels, self.rep_dim = in_channels, rep_dim
        momentum = 0.1
        n = (depth - 4) // 6
        widths = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        self.conv = nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)
        groups: list[nn.Module] = []
        for g, stride in enumerate((1, 2, 2)):
            for i in range(n):
                groups.append(
                    _PreActBlock(
                        widths[g] if i == 0 else widths[g + 1],
                        widths[g + 1],
                        stride if i == 0 else 1,
                        dropout,
                        momentum,
                    )
                )
        self.blocks = nn.Sequential(*groups)
        self.bn = nn.BatchNorm2d(widths[3], momentum=momentum)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(widths[3], rep_dim)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _check_images("WideResNet", self.in_channels, images)
        out = self.blocks(self.conv(images))
        return self.fc(self.pool(self.relu(self.bn(out))))


def monai_resnet(
    in_channels: int,
    image_size: tuple[int, int],
    layers: Sequence[int] = (2, 2, 2, 2),
    widths: Sequence[int] = (64, 128, 256, 512),
    block: str = "basic",
    rep_dim: int = 32,
) -> nn.Module:
    """MONAI's 2-D ResNet (ResNet-18 layout by default) for bring-your-own images, so a site can use
    the network family its imaging pipeline already knows. The stem is a stride-1 3x3 conv with no
    max pool: the 7x7/2 stem and pool would shrink a 16-px-wide strip to nothing (DenseNet121
    collapses on such strips for the same reason). MONAI's fc layer (linear) maps to rep_dim, so the
    returned module's forward(images) gives [n, rep_dim].
    """
    _check_inputs("monai_resnet", in_channels, image_size, rep_dim)
    layers, widths = [int(v) for v in layers], [int(v) for v in widths]
    if len(layers) != 4 or min(layers) < 1:
        raise ValueError(f"monai_resnet: layers must be 4 block counts >= 1, got {layers}")
    if len(widths) != 4 or min(widths) < 1:
        raise ValueError(f"monai_resnet: widths must be 4 channel counts >= 1, got {widths}")
    if block not in ("basic", "bottleneck"):
        raise ValueError(f"monai_resnet: block must be 'basic' or 'bottleneck', got {block!r}")
    from monai.networks.nets import ResNet  # MONAI is heavy to import; only image sites pay for it

    return ResNet(
        block=block,
        layers=layers,
        block_inplanes=widths,
        spatial_dims=2,
        n_input_channels=in_channels,
        conv1_t_size=3,
        conv1_t_stride=1,
        no_max_pool=True,
        num_classes=rep_dim,
    )
