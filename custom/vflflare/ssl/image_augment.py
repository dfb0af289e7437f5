"""Image augmentations as callables ImageBatch -> ImageBatch (each site's vertical strips, standardised per channel).

Two view pairs, reusing the generic view classes of `vflflare.ssl.augment`:

* `fixmatch_image_views` -> WeakStrongViews. FixMatch (Sohn et al., NeurIPS 2020), which the one-shot VFL paper
  (Sun et al., Sec. "Local SSL") applies unchanged to the clients' CIFAR-10 halves:
    - weak alpha(x) (`FixMatchWeak`): random horizontal flip (p 0.5) + random translation by up to 12.5 % of each
      side, done as in FixMatch's code by reflect padding and a crop back to size at an offset uniform over every
      position (`flip_and_shift`);
    - strong A(x) (`FixMatchStrong`), applied on top of the weak view: RandAugment as FixMatch uses it (2 distinct
      ops per image in random order, each with a magnitude drawn uniformly from its range), then Cutout with one
      square hole of half the smaller side, inside the image at a uniform position, filled with 0, the channel
      mean after standardisation (`cutout`). The ops and their stand-ins on standardised pixels
      (`fixmatch_randaugment_ops`):
        Identity;
        Brightness -> `shift_brightness`, offset +-0.9 (standardised pixels have no known black level);
        Contrast [0.05, 0.95] -> `scale_contrast` about the image mean, as PIL does;
        AutoContrast / Solarize / Posterize (intensity curves) -> `gamma_curve`, gamma 0.5-2 over the image's
        own range;
        Equalize (histogram remap) -> `histogram_shift`, 4-10 random control points (MONAI's RandHistogramShift
        rule), leaving nearly flat images alone;
        Sharpness [0.05, 0.95] -> `blend_sharpness` (PIL's ImageEnhance.Sharpness);
        Color [0.05, 0.95] (3 channels only) -> `adjust_saturation`;
        Rotate +-30 deg, ShearX/Y +-0.3, TranslateX/Y +-30 % -> `affine_warp`, filled with 0 (the mean) as FixMatch
        fills with grey.
* `contrastive_image_views` -> TwoViews of `SimSiamView`: two independent draws of the SimSiam (Chen & He,
  CVPR 2021) augmentation that FedHSSL (He et al., experiments, "Data Augmentation": "following [40]" = SimSiam)
  uses for its image parties; SS-VFL (Castiglia et al.) names data augmentation for its contrastive step without
  details. Steps: random resized crop, area 0.2-1.0 of the image and log-uniform aspect ratio 3/4-4/3 relative
  to the strip's own (so a 28x14 strip is not stretched 2x; torchvision's rule on the papers' square images),
  bilinear back to the image size, 10 attempts then the whole image (`draw_resized_crop_boxes`, `resized_crop`);
  horizontal flip p 0.5; with p 0.8 a colour jitter in random order of brightness (+-0.4), contrast (factor
  0.6-1.4) and, for 3 channels, saturation (factor 0.6-1.4) (`color_jitter`); grayscale with p 0.2 for 3 channels
  (`to_grayscale`); Gaussian blur with p 0.5 (`gaussian_blur`).

Colour ops use the ITU-R 601 luma weights on the standardised channels (the site's raw statistics are not at hand),
which keeps grey standardised pixels grey.

Batched: a view draws every random parameter of the whole batch at once (`draw`) and applies each op to the whole
[n, C, H, W] tensor (`apply`) on the images' device, with per-image parameters broadcast as [n, 1, 1, 1] and
per-image on/off decisions as masks; no loop runs over the images. The affine ops of one RandAugment step share one
`affine_grid`/`grid_sample` call; crops, resizes, flips and blurs are gathers or per-image [side, side] matrices
(a product on each side of the image). This replaces MONAI transforms run one image at a time (0.1-0.3 ms per view
and image on one core, now 0.002-0.025 ms: bench/probes/image_views.py) and drops MONAI from this module.

The distributions are those of the per-image version. What differs is only how the numbers come about:
* parameters come straight from torch's generator instead of a numpy RandomState seeded from it, so a seed gives
  other views than before, and an empty batch draws nothing;
* SimSiam's jitter draws only whether saturation precedes contrast (p 1/2) instead of a permutation of all three
  ops, and applies the composition in closed form (`color_jitter`): brightness commutes with both, so the maps
  and their distribution are the same;
* float32 rounding differs slightly from MONAI's and torch's per-image ops (e.g. the histogram remap is evaluated
  in [0, 1] coordinates of the image's range, the gamma curve as exp(g log t), the resize as a matrix product).

Determinism: all draws come from the caller's torch.Generator (on its device), in a fixed order and with shapes
that depend only on the batch size, so the same generator seed gives bit-identical views on one device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from vflflare.data.image_batch import ImageBatch
from vflflare.ssl.augment import TwoViews, WeakStrongViews

_LUMA = (0.299, 0.587, 0.114)  # ITU-R 601-2, as PIL's convert("L") and torchvision's rgb_to_grayscale
_EQUALIZE_POINTS = (4, 10)  # control points of the histogram remap, MONAI's RandHistogramShift((4, 10))
_FLAT_RANGE = 1e-4  # an image whose range is below this much of its magnitude is "flat" for the remap
_CROP_ATTEMPTS = 10  # torchvision's RandomResizedCrop tries 10 boxes before taking the whole image


def _per_image(values: torch.Tensor) -> torch.Tensor:
    """[n] -> [n, 1, 1, 1]: one parameter per image, broadcast over its pixels."""
    return values.reshape(-1, 1, 1, 1)


def _between(uniform: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """U(0, 1) draws mapped to U(low, high)."""
    return low + (high - low) * uniform


def _image_range(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-image minimum and maximum over all channels, each [n, 1, 1, 1] (MONAI's intensity ops take the
    range of the whole image, not per channel)."""
    low, high = torch.aminmax(images.flatten(1), dim=1)
    return _per_image(low), _per_image(high)


def _on_rows(images: torch.Tensor, rows: torch.Tensor, op: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """`images` with `op` applied to the images where the bool mask `rows` [n] holds; op sees only those, so an
    op that most images skip costs only its share. Out of place."""
    index = rows.nonzero().squeeze(1)
    if index.numel() == 0:
        return images
    return images.index_copy(0, index, op(images.index_select(0, index)))


# --- Intensity and colour ops (pure functions of a batch and per-image parameters [n]) ------------------------


def luma(images: torch.Tensor) -> torch.Tensor:
    """[n, 1, H, W] ITU-R 601 luma of [n, 3, H, W] images."""
    if images.shape[1] != 3:
        raise ValueError(f"luma needs 3 channels, got {images.shape[1]}")
    weights = images.new_tensor(_LUMA).view(1, 3, 1, 1)
    return (images * weights).sum(dim=1, keepdim=True)


def to_grayscale(images: torch.Tensor) -> torch.Tensor:
    """Every channel of a 3-channel image becomes its luma: torchvision's RandomGrayscale (SimSiam, p 0.2)."""
    return luma(images).expand_as(images).contiguous()


def adjust_saturation(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """x -> g + s (x - g) with g the luma and s = `factor` per image: PIL's ImageEnhance.Color (FixMatch's Color)
    and torchvision's saturation jitter (SimSiam)."""
    gray = luma(images)
    return gray + _per_image(factor) * (images - gray)


def shift_brightness(images: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """x -> x + b per image: RandAugment's Brightness / SimSiam's brightness jitter on standardised pixels, whose
    black level is unknown, as MONAI's RandShiftIntensity."""
    return images + _per_image(offset)


def scale_contrast(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """x -> m + f (x - m) with m the image mean (all channels) and f = `factor`: PIL's ImageEnhance.Contrast
    (FixMatch's Contrast) and SimSiam's contrast jitter, as MONAI's RandScaleIntensityFixedMean."""
    mean = images.mean(dim=(1, 2, 3), keepdim=True)
    return mean + _per_image(factor) * (images - mean)


def gamma_curve(images: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """((x - min) / range) ** gamma over each image's own range: the stand-in for RandAugment's intensity curves
    (AutoContrast, Solarize, Posterize), MONAI's RandAdjustContrast (with its 1e-7 in the denominator, so a flat
    image stays flat)."""
    low, high = _image_range(images)
    span = high - low
    fraction = (images - low) / (span + 1e-7)
    # t ** g as exp(g log t) (log 0 = -inf gives 0): a per-image exponent makes torch's pow ~4x slower on the CPU
    return torch.exp(_per_image(gamma) * torch.log(fraction)) * span + low


def histogram_control_points(
    count_uniform: torch.Tensor, point_uniforms: torch.Tensor, num_points: tuple[int, int] = _EQUALIZE_POINTS
) -> tuple[torch.Tensor, torch.Tensor]:
    """MONAI RandHistogramShift's random curve, for a batch: a count k uniform in `num_points` (from
    `count_uniform` [n]), reference points linspace(0, 1, k), and moved points where point i is uniform between
    moved point i - 1 and reference point i + 1 (from `point_uniforms` [n, max - 2]). Returns the moved points
    [n, max] (1 past each image's k) and k [n]. The loop runs over the at most 8 inner points, not the images."""
    low, high = num_points
    count = low + (count_uniform * (high - low + 1)).long().clamp(max=high - low)
    steps = torch.arange(high, device=count_uniform.device, dtype=count_uniform.dtype)
    reference = (steps / (count - 1).unsqueeze(1).to(count_uniform.dtype)).clamp(max=1.0)
    points = reference.clone()
    for i in range(1, high - 1):
        moved = points[:, i - 1] + point_uniforms[:, i - 1] * (reference[:, i + 1] - points[:, i - 1])
        points[:, i] = torch.where(i < count - 1, moved, points[:, i])
    return points, count


def histogram_shift(images: torch.Tensor, points: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """RandAugment's Equalize stand-in, MONAI's RandHistogramShift: each image's values, as fractions t of its
    [min, max], go through the piecewise-linear curve through (i / (k - 1), points[i]), i < k (k = `count` per
    image), and back to [min, max]. The reference points are evenly spaced, so t's segment is floor(t (k - 1)).

    An image whose range is at float32 rounding level relative to its values (<= 1e-4 of its magnitude) is
    returned unchanged, as MONAI returns an exactly constant one. MONAI rescales its control points by the range;
    for such an image they collapse to equal float32 values and its map divides by zero, giving inf/NaN pixels.
    This happens in FixMatch: a weak crop of an all-background MNIST strip that the contrast op then scales
    leaves a range of ~1e-7, and one such view turned a site's training to NaN."""
    low, high = _image_range(images)
    span = high - low
    flat = span <= _FLAT_RANGE * torch.maximum(low.abs(), high.abs()).clamp(min=1.0)
    segments = _per_image(count - 1).to(images.dtype)
    position = (images - low) / torch.where(flat, torch.ones_like(span), span) * segments
    segment = torch.minimum(position.floor().clamp(min=0.0), segments - 1)
    fraction = position - segment
    index = segment.long().flatten(1)
    start = points.gather(1, index).view_as(images)
    end = points.gather(1, index + 1).view_as(images)
    remapped = low + (start + fraction * (end - start)) * span
    return torch.where(flat, images, remapped)


def blend_sharpness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """PIL's ImageEnhance.Sharpness as FixMatch's RandAugment uses it: blend with the image smoothed by PIL's 3x3
    SMOOTH kernel ([[1,1,1],[1,5,1],[1,1,1]] / 13, border pixels kept), x -> smooth + f (x - smooth);
    f < 1 blurs, f > 1 sharpens. (MONAI's RandGaussianSharpen is a different, much stronger unsharp mask.)"""
    if min(images.shape[-2:]) < 3:
        return images
    rows = images[..., :-2, :] + images[..., 1:-1, :] + images[..., 2:, :]  # separable 3x3 box sum
    box = rows[..., :-2] + rows[..., 1:-1] + rows[..., 2:]
    smooth = images.clone()
    smooth[..., 1:-1, 1:-1] = (box + 4.0 * images[..., 1:-1, 1:-1]) / 13.0
    return smooth + _per_image(factor) * (images - smooth)


# --- Geometric ops --------------------------------------------------------------------------------------------


def affine_warp(
    images: torch.Tensor,
    degrees: torch.Tensor,
    shear_x: torch.Tensor,
    shear_y: torch.Tensor,
    move_x: torch.Tensor,
    move_y: torch.Tensor,
) -> torch.Tensor:
    """RandAugment's Rotate, ShearX/Y and TranslateX/Y as one map per image (parameters [n]): output pixel (x, y)
    about the centre reads input rotation(degrees) @ shear(shear_x, shear_y) @ (x, y) + (move_x width,
    move_y height), bilinear, pixels from outside filled with 0 (the channel mean after standardisation;
    FixMatch fills with grey). One affine_grid/grid_sample call for the whole batch."""
    height, width = images.shape[-2:]
    radians = torch.deg2rad(degrees)
    cos, sin = torch.cos(radians), torch.sin(radians)
    a00, a01 = cos - sin * shear_y, cos * shear_x - sin
    a10, a11 = sin + cos * shear_y, sin * shear_x + cos
    # affine_grid works in [-1, 1] coordinates, x scaled by 2 / width and y by 2 / height, which rescales the
    # off-diagonal terms and makes a shift of move * side a shift of 2 move
    theta = (
        torch.stack([a00, a01 * (height / width), 2.0 * move_x, a10 * (width / height), a11, 2.0 * move_y], dim=1)
        .view(-1, 2, 3)
        .to(images.dtype)
    )
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def flip_and_shift(
    images: torch.Tensor, flip: torch.Tensor, top: torch.Tensor, left: torch.Tensor, pad: tuple[int, int]
) -> torch.Tensor:
    """FixMatch's weak augmentation: flip (bool [n]) horizontally, reflect-pad by `pad` (rows, columns) and crop
    back to size at offset (top, left) [n] of the padded image, as one gather. Reflect padding is symmetric, so
    padding a flipped image equals flipping the padded one: a flip only mirrors the columns that are read."""
    n, channels, height, width = images.shape
    padded = F.pad(images, (pad[1], pad[1], pad[0], pad[0]), mode="reflect")
    padded_width = width + 2 * pad[1]
    rows = top.unsqueeze(1) + torch.arange(height, device=images.device)
    cols = left.unsqueeze(1) + torch.arange(width, device=images.device)
    cols = torch.where(flip.unsqueeze(1), padded_width - 1 - cols, cols)
    index = (rows.unsqueeze(2) * padded_width + cols.unsqueeze(1)).view(n, 1, height * width)
    return padded.flatten(2).gather(2, index.expand(n, channels, -1)).view(n, channels, height, width)


def cutout(images: torch.Tensor, top: torch.Tensor, left: torch.Tensor, hole: tuple[int, int]) -> torch.Tensor:
    """Cutout (DeVries & Taylor; FixMatch's strong view): a hole[0] x hole[1] box at (top, left) [n] set to 0,
    the channel mean after standardisation."""
    height, width = images.shape[-2:]
    rows = torch.arange(height, device=images.device) - top.unsqueeze(1)
    cols = torch.arange(width, device=images.device) - left.unsqueeze(1)
    in_rows = (rows >= 0) & (rows < hole[0])
    in_cols = (cols >= 0) & (cols < hole[1])
    return images.masked_fill((in_rows.unsqueeze(2) & in_cols.unsqueeze(1)).unsqueeze(1), 0.0)


def _reflect(index: torch.Tensor, size: int) -> torch.Tensor:
    """Indices outside [0, size) mirrored without repeating the edge ('reflect', as numpy/torch padding), for any
    distance (a wide kernel on a narrow strip reflects more than once)."""
    if size == 1:
        return torch.zeros_like(index)
    period = 2 * (size - 1)
    index = index.remainder(period)
    return torch.where(index >= size, period - index, index)


def gaussian_blur_matrices(sigma: torch.Tensor, size: int) -> torch.Tensor:
    """[n, size, size] matrices M with M @ signal = the signal blurred by a Gaussian of std sigma[i] (reflect
    borders, truncated at radius max(1, ceil(4 sigma)), as MONAI's GaussianFilter). Kernels of all images are
    padded to the largest radius with zeros, so one scatter builds every matrix."""
    radius = torch.ceil(4.0 * sigma).clamp(min=1.0)
    widest = int(radius.max())
    taps = torch.arange(-widest, widest + 1, device=sigma.device, dtype=sigma.dtype)
    kernel = torch.exp(-0.5 * (taps / sigma.unsqueeze(1)) ** 2) * (taps.abs() <= radius.unsqueeze(1))
    kernel = kernel / kernel.sum(dim=1, keepdim=True)
    positions = torch.arange(size, device=sigma.device)
    columns = _reflect(positions.unsqueeze(1) + taps.long(), size)  # [size, taps]
    n = len(sigma)
    matrices = torch.zeros(n, size, size, device=sigma.device, dtype=sigma.dtype)
    return matrices.scatter_add_(2, columns.expand(n, -1, -1), kernel.unsqueeze(1).expand(-1, size, -1))


def gaussian_blur(images: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """SimSiam/SimCLR's GaussianBlur, isotropic with std sigma [n] per image: separable, as a product with a blur
    matrix on each side of the image (per-image kernels of different widths fit no single convolution)."""
    sigma = sigma.to(images.dtype)
    rows = gaussian_blur_matrices(sigma, images.shape[-2])
    cols = gaussian_blur_matrices(sigma, images.shape[-1])
    return rows.unsqueeze(1) @ images @ cols.transpose(1, 2).unsqueeze(1)


def _resize_matrices(start: torch.Tensor, length: torch.Tensor, size: int) -> torch.Tensor:
    """[n, size, size] matrices that take the pixels start..start+length-1 of a side of `size` pixels and resize
    them to `size` bilinearly, as F.interpolate(mode="bilinear", align_corners=False) does: output i reads
    source (i + 0.5) length / size - 0.5, clamped to the crop."""
    dtype = torch.float32
    scale = (length.to(dtype) / size).unsqueeze(1)
    source = ((torch.arange(size, device=start.device, dtype=dtype) + 0.5) * scale - 0.5).clamp(min=0.0)
    lower = source.floor()
    weight = (source - lower).unsqueeze(2)
    lower = lower.long()
    upper = torch.minimum(lower + 1, (length - 1).unsqueeze(1))
    offset = start.unsqueeze(1)
    matrices = torch.zeros(len(start), size, size, device=start.device, dtype=dtype)
    matrices.scatter_add_(2, (offset + lower).unsqueeze(2), 1.0 - weight)
    return matrices.scatter_add_(2, (offset + upper).unsqueeze(2), weight)


def resized_crop(
    images: torch.Tensor,
    top: torch.Tensor,
    left: torch.Tensor,
    height: torch.Tensor,
    width: torch.Tensor,
    flip: torch.Tensor | None = None,
) -> torch.Tensor:
    """SimSiam's RandomResizedCrop (then RandomHorizontalFlip): the box (top, left, height, width) [n] of each
    image resized bilinearly back to the image size, as a product with a resize matrix on each side; a flip
    (bool [n]) reverses the column matrix, so it costs nothing."""
    rows = _resize_matrices(top, height, images.shape[-2]).to(images.dtype)
    cols = _resize_matrices(left, width, images.shape[-1]).to(images.dtype)
    if flip is not None:
        cols = torch.where(flip.view(-1, 1, 1), cols.flip(1), cols)
    return rows.unsqueeze(1) @ images @ cols.transpose(1, 2).unsqueeze(1)


def color_jitter(
    images: torch.Tensor,
    brightness: torch.Tensor,
    contrast: torch.Tensor,
    saturation: torch.Tensor | None,
    saturation_first: torch.Tensor,
) -> torch.Tensor:
    """torchvision's ColorJitter as SimSiam uses it: `shift_brightness`, `scale_contrast` and (3 channels; None
    skips it) `adjust_saturation`, per image in a random order, written as the composition in closed form.
    Brightness commutes with both others (luma weights and the mean both move by the same offset), so only
    whether saturation S comes before contrast C matters (`saturation_first`, bool [n]). S maps a constant image
    to itself, so with m the mean and f the contrast factor
        C(S(x)) = mean(S(x)) + f (S(x) - mean(S(x)))   and   S(C(x)) = mean(x) + f (S(x) - mean(x)),
    one formula with the mean taken before or after saturation: the same maps as applying the three ops in turn,
    at the cost of about one op instead of every op at every step."""
    saturated = images if saturation is None else adjust_saturation(images, saturation)
    mean_before = images.mean(dim=(1, 2, 3), keepdim=True)
    mean_after = saturated.mean(dim=(1, 2, 3), keepdim=True)
    mean = torch.where(_per_image(saturation_first), mean_after, mean_before)
    return mean + _per_image(contrast) * (saturated - mean) + _per_image(brightness)


# --- The views: draw every parameter of the batch, then apply ------------------------------------------------


class _BatchedView:
    """ImageBatch -> ImageBatch for images of one shape: `draw(n)` takes every random parameter of a batch of n
    from the generator at once, `apply(images, drawn)` runs the ops on the whole batch on the images' device.
    Input images are never modified; output is float32."""

    def __init__(self, channels: int, image_size: tuple[int, int], generator: torch.Generator) -> None:
        self.channels = channels
        self.image_size = tuple(image_size)
        self.generator = generator

    def _uniform(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.rand(shape, generator=self.generator, device=self.generator.device, dtype=dtype)

    def _randint(self, high: int, n: int) -> torch.Tensor:
        """n integers uniform in [0, high)."""
        return torch.randint(high, (n,), generator=self.generator, device=self.generator.device)

    def draw(self, n: int) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def apply(self, images: torch.Tensor, drawn: tuple[torch.Tensor, ...]) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, batch: ImageBatch) -> ImageBatch:
        images = batch.images
        expected = (self.channels, *self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(f"expected images of shape [n, {', '.join(map(str, expected))}], got {list(images.shape)}")
        images = images.to(torch.float32)
        if images.shape[0] == 0:
            return ImageBatch(images.clone())
        drawn = self.draw(images.shape[0])
        drawn = type(drawn)(*(value.to(images.device) for value in drawn))
        return ImageBatch(self.apply(images, drawn).contiguous())


def _check_shape(channels: int, image_size: tuple[int, int]) -> tuple[int, int]:
    if channels < 1 or len(image_size) != 2 or min(image_size) < 2:
        raise ValueError(f"need channels >= 1 and an image size of at least 2x2, got {channels}, {image_size}")
    return int(image_size[0]), int(image_size[1])


def _translation_pad(side: int) -> int:
    """Pixels of padding (= largest shift) for a translation of up to 12.5 % of `side`: FixMatch's
    int(0.125 * side) (4 on CIFAR's 32), at least 1 so that small strips (< 8 px) still move."""
    return min(max(1, int(0.125 * side)), side - 1)


class WeakDraw(NamedTuple):
    flip: torch.Tensor  # bool [n]
    top: torch.Tensor  # int64 [n], 0..2 pad rows: the crop's offset in the padded image
    left: torch.Tensor  # int64 [n], 0..2 pad columns


class FixMatchWeak(_BatchedView):
    """FixMatch's weak view alpha(x): flip with p 0.5, and a shift uniform over every crop of the reflect-padded
    image (`flip_and_shift`)."""

    def __init__(self, channels: int, image_size: tuple[int, int], generator: torch.Generator) -> None:
        super().__init__(channels, image_size, generator)
        self.pad = (_translation_pad(self.image_size[0]), _translation_pad(self.image_size[1]))

    def draw(self, n: int) -> WeakDraw:
        flip = self._uniform(n) < 0.5
        return WeakDraw(flip, self._randint(2 * self.pad[0] + 1, n), self._randint(2 * self.pad[1] + 1, n))

    def apply(self, images: torch.Tensor, drawn: WeakDraw) -> torch.Tensor:
        return flip_and_shift(images, drawn.flip, drawn.top, drawn.left, self.pad)


class RandAugmentOp(NamedTuple):
    """One op of FixMatch's RandAugment list, with its parameters taken from a row of uniforms u [m, UNIFORMS]
    (u[:, 0] the magnitude; Equalize also uses the rest). `pixels(images, u)` applies an intensity op; a geometric
    op gives `affine(u)` -> [m, 5] (degrees, shear_x, shear_y, move_x, move_y) so that all geometric ops of a step
    share one `affine_warp`. Identity has neither."""

    name: str
    pixels: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    affine: Callable[[torch.Tensor], torch.Tensor] | None = None


UNIFORMS = _EQUALIZE_POINTS[1]  # per op and image: magnitude, control point count, the inner control points


def _equalize(images: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    points, count = histogram_control_points(uniforms[:, 1], uniforms[:, 2:])
    return histogram_shift(images, points, count)


def _geometric(slot: int, magnitude: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """Affine parameters with entry `slot` of (degrees, shear_x, shear_y, move_x, move_y) uniform in
    +-magnitude and the others 0."""

    def params(uniforms: torch.Tensor) -> torch.Tensor:
        out = uniforms.new_zeros(len(uniforms), 5)
        out[:, slot] = _between(uniforms[:, 0], -magnitude, magnitude)
        return out

    return params


def fixmatch_randaugment_ops(channels: int) -> list[RandAugmentOp]:
    """FixMatch's RandAugment op list on standardised pixels (see the module docstring); each op applies with
    probability 1 and draws its magnitude uniformly from FixMatch's range."""
    ops = [
        RandAugmentOp("Identity"),
        RandAugmentOp("Brightness", pixels=lambda x, u: shift_brightness(x, _between(u[:, 0], -0.9, 0.9))),
        RandAugmentOp("Contrast", pixels=lambda x, u: scale_contrast(x, _between(u[:, 0], 0.05, 0.95))),
        RandAugmentOp("Curve", pixels=lambda x, u: gamma_curve(x, _between(u[:, 0], 0.5, 2.0))),  # AutoContrast etc.
        RandAugmentOp("Equalize", pixels=_equalize),
        RandAugmentOp("Sharpness", pixels=lambda x, u: blend_sharpness(x, _between(u[:, 0], 0.05, 0.95))),
        RandAugmentOp("Rotate", affine=_geometric(0, 30.0)),
        RandAugmentOp("ShearX", affine=_geometric(1, 0.3)),
        RandAugmentOp("ShearY", affine=_geometric(2, 0.3)),
        RandAugmentOp("TranslateX", affine=_geometric(3, 0.3)),
        RandAugmentOp("TranslateY", affine=_geometric(4, 0.3)),
    ]
    if channels == 3:
        ops.append(RandAugmentOp("Color", pixels=lambda x, u: adjust_saturation(x, _between(u[:, 0], 0.05, 0.95))))
    return ops


class StrongDraw(NamedTuple):
    ops: torch.Tensor  # int64 [n, 2]: each image's two distinct op indices, in the order applied
    uniforms: torch.Tensor  # float32 [n, 2, UNIFORMS]: each op's parameters as U(0, 1) draws
    hole_top: torch.Tensor  # int64 [n]
    hole_left: torch.Tensor  # int64 [n]


class FixMatchStrong(_BatchedView):
    """FixMatch's strong view A(x) on top of the weak one: RandAugment with 2 distinct ops per image (an ordered
    pair uniform over all pairs, as sampling without replacement), then `cutout` with a hole of half the smaller
    side at a uniform position inside the image. Each op runs only on the images that drew it."""

    def __init__(self, channels: int, image_size: tuple[int, int], generator: torch.Generator) -> None:
        super().__init__(channels, image_size, generator)
        self.ops = fixmatch_randaugment_ops(channels)
        side = max(1, min(self.image_size) // 2)
        self.hole = (side, side)

    def draw(self, n: int) -> StrongDraw:
        count = len(self.ops)
        first = self._randint(count, n)
        second = (first + 1 + self._randint(count - 1, n)) % count  # uniform over the other ops
        uniforms = self._uniform(n, 2, UNIFORMS)
        hole_top = self._randint(self.image_size[0] - self.hole[0] + 1, n)
        hole_left = self._randint(self.image_size[1] - self.hole[1] + 1, n)
        return StrongDraw(torch.stack([first, second], dim=1), uniforms, hole_top, hole_left)

    def _step(self, images: torch.Tensor, ops: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        """One RandAugment step: image i gets op ops[i] with parameters from uniforms[i] (writes into `images`)."""
        warped_rows, warps = [], []
        for index, op in enumerate(self.ops):
            if op.pixels is None and op.affine is None:
                continue
            rows = (ops == index).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            if op.pixels is not None:
                images[rows] = op.pixels(images[rows], uniforms[rows])
            else:
                warped_rows.append(rows)
                warps.append(op.affine(uniforms[rows]))
        if warped_rows:
            rows = torch.cat(warped_rows)
            images[rows] = affine_warp(images[rows], *torch.cat(warps).unbind(1))
        return images

    def apply(self, images: torch.Tensor, drawn: StrongDraw) -> torch.Tensor:
        out = images.clone()
        for step in range(drawn.ops.shape[1]):
            out = self._step(out, drawn.ops[:, step], drawn.uniforms[:, step])
        return cutout(out, drawn.hole_top, drawn.hole_left, self.hole)


def fixmatch_image_views(channels: int, image_size: tuple[int, int], generator: torch.Generator) -> WeakStrongViews:
    """FixMatch's (weak, strong) pair for a site's image strips, as the one-shot VFL paper uses for local SSL:
    pseudo-labels come from the weak view, the consistency loss from the strong one drawn on top of it."""
    size = _check_shape(channels, image_size)
    return WeakStrongViews(FixMatchWeak(channels, size, generator), FixMatchStrong(channels, size, generator))


def draw_resized_crop_boxes(
    uniforms: torch.Tensor,
    image_size: tuple[int, int],
    scale: tuple[float, float] = (0.2, 1.0),
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """torchvision's RandomResizedCrop box, SimSiam's crop, from uniforms [n, attempts * 2 + 2]: each attempt
    draws an area ~ U(scale) of the image and a log-uniform aspect ratio in `ratio` (relative to the image's own
    aspect ratio), sides rounded; the first attempt whose box fits is taken, and if none fits the whole image.
    All attempts are drawn at once and the first fitting one kept, which has the distribution of trying them in
    turn. The box's position is uniform over the places it fits. Returns (top, left, height, width), int64 [n]."""
    height, width = image_size
    attempts = (uniforms.shape[1] - 2) // 2
    area = height * width * _between(uniforms[:, :attempts], *scale)
    log_ratio = _between(uniforms[:, attempts : 2 * attempts], math.log(ratio[0]), math.log(ratio[1]))
    aspect = torch.exp(log_ratio) * (width / height)
    crop_w = torch.round(torch.sqrt(area * aspect)).long()
    crop_h = torch.round(torch.sqrt(area / aspect)).long()
    fits = (crop_w >= 1) & (crop_w <= width) & (crop_h >= 1) & (crop_h <= height)
    first = fits.int().argmax(dim=1, keepdim=True)  # argmax returns the first of equal maxima
    found = fits.any(dim=1)
    crop_h = torch.where(found, crop_h.gather(1, first).squeeze(1), height)
    crop_w = torch.where(found, crop_w.gather(1, first).squeeze(1), width)
    top = torch.minimum((uniforms[:, -2] * (height - crop_h + 1)).long(), height - crop_h)
    left = torch.minimum((uniforms[:, -1] * (width - crop_w + 1)).long(), width - crop_w)
    return top, left, crop_h, crop_w


def _blur_sigma(image_size: tuple[int, int]) -> tuple[float, float]:
    """SimSiam's sigma range (0.1, 2.0) is for 224 px; scaled with the smaller side but never below (0.1, 1.0),
    so that a blur still blurs a 14 px strip without wiping it out."""
    return 0.1, max(1.0, 2.0 * min(image_size) / 224.0)


class SimSiamDraw(NamedTuple):
    top: torch.Tensor  # int64 [n]: the crop box
    left: torch.Tensor
    height: torch.Tensor
    width: torch.Tensor
    flip: torch.Tensor  # bool [n]
    jitter: torch.Tensor  # bool [n]
    saturation_first: torch.Tensor  # bool [n], p 1/2: saturation before contrast in the jitter's random order
    brightness: torch.Tensor  # float32 [n], offset
    contrast: torch.Tensor  # factor
    saturation: torch.Tensor  # factor
    gray: torch.Tensor  # bool [n]
    blur: torch.Tensor  # bool [n]
    sigma: torch.Tensor  # float32 [n]


class SimSiamView(_BatchedView):
    """SimSiam's augmentation (module docstring): resized crop and flip, colour jitter with p 0.8 in random order,
    grayscale with p 0.2 (3 channels), Gaussian blur with p 0.5; colour-only steps are skipped for 1 channel."""

    def __init__(
        self,
        channels: int,
        image_size: tuple[int, int],
        generator: torch.Generator,
        scale: tuple[float, float] = (0.2, 1.0),
    ) -> None:
        super().__init__(channels, image_size, generator)
        if not 0 < scale[0] <= scale[1] <= 1.0:
            raise ValueError(f"need 0 < scale low <= high <= 1, got {scale}")
        self.scale = (float(scale[0]), float(scale[1]))
        self.sigma = _blur_sigma(self.image_size)

    def draw(self, n: int) -> SimSiamDraw:
        box = draw_resized_crop_boxes(
            self._uniform(n, 2 * _CROP_ATTEMPTS + 2, dtype=torch.float64), self.image_size, self.scale
        )
        u = self._uniform(n, 9)
        return SimSiamDraw(
            *box,
            flip=u[:, 0] < 0.5,
            jitter=u[:, 1] < 0.8,
            # in a uniform random order of the three jitter ops saturation precedes contrast half the time;
            # where brightness goes does not matter (`color_jitter`)
            saturation_first=u[:, 8] < 0.5,
            brightness=_between(u[:, 2], -0.4, 0.4),
            contrast=_between(u[:, 3], 0.6, 1.4),
            saturation=_between(u[:, 4], 0.6, 1.4),
            gray=u[:, 5] < 0.2,
            blur=u[:, 6] < 0.5,
            sigma=_between(u[:, 7], *self.sigma),
        )

    def apply(self, images: torch.Tensor, drawn: SimSiamDraw) -> torch.Tensor:
        colour = self.channels == 3
        out = resized_crop(images, drawn.top, drawn.left, drawn.height, drawn.width, drawn.flip)
        jitter = drawn.jitter
        out = _on_rows(
            out,
            jitter,
            lambda x: color_jitter(
                x,
                drawn.brightness[jitter],
                drawn.contrast[jitter],
                drawn.saturation[jitter] if colour else None,
                drawn.saturation_first[jitter],
            ),
        )
        if colour:
            out = torch.where(_per_image(drawn.gray), to_grayscale(out), out)
        return _on_rows(out, drawn.blur, lambda x: gaussian_blur(x, drawn.sigma[drawn.blur]))


def contrastive_image_views(channels: int, image_size: tuple[int, int], generator: torch.Generator) -> TwoViews:
    """Two independent SimSiam-style views of each strip, for SS-VFL's local contrastive and FedHSSL's
    (non-)contrastive SSL: positives are two augmentations of the same image."""
    size = _check_shape(channels, image_size)
    return TwoViews(SimSiamView(channels, size, generator))
