"""Image augmentations as callables ImageBatch -> ImageBatch (each site's vertical strips, standardised per channel).

Two view pairs, reusing the generic view classes of `vflflare.ssl.augment`:

* `fixmatch_image_views` -> WeakStrongViews. FixMatch (Sohn et al., NeurIPS 2020), which the one-shot VFL paper
  (Sun et al., Sec. "Local SSL") applies unchanged to the clients' CIFAR-10 halves:
    - weak alpha(x): random horizontal flip (MONAI `RandFlip`) + random translation by up to 12.5 % of each side,
      done as in FixMatch's code by reflect padding and a random crop back to size (MONAI `SpatialPad` with
      mode "reflect", padded once for the whole batch, then MONAI `RandSpatialCrop` per image);
    - strong A(x), applied on top of the weak view: RandAugment as FixMatch uses it (2 distinct ops per image,
      each with a magnitude drawn uniformly from its range, MONAI `SomeOf`), then Cutout with one square hole of
      half the smaller side filled with 0, the channel mean after standardisation (MONAI `RandCoarseDropout`).
      The ops and their stand-ins on standardised pixels:
        Identity -> MONAI `Identity`;
        Brightness -> MONAI `RandShiftIntensity` (+-0.9 channel std: standardised pixels have no known black level);
        Contrast [0.05, 0.95] -> MONAI `RandScaleIntensityFixedMean` (scales about the image mean, as PIL does);
        AutoContrast / Solarize / Posterize (intensity curves) -> MONAI `RandAdjustContrast` (gamma 0.5-2 over the
        image's own range);
        Equalize (histogram remap) -> `RandEqualize` (MONAI `RandHistogramShift`, leaving near-flat images alone);
        Sharpness [0.05, 0.95] -> `RandSharpness` (here);
        Color [0.05, 0.95] (3 channels only) -> `RandSaturation` (here);
        Rotate +-30 deg, ShearX/Y +-0.3, TranslateX/Y +-30 % -> `RandAffine2d` (here), filled with 0 (the mean)
        as FixMatch fills with grey.
* `contrastive_image_views` -> TwoViews: two independent draws of the SimSiam (Chen & He, CVPR 2021) augmentation
  that FedHSSL (He et al., experiments, "Data Augmentation": "following [40]" = SimSiam) uses for its image
  parties; SS-VFL (Castiglia et al.) names data augmentation for its contrastive step without details. Steps:
    random resized crop, area 0.2-1.0, back to the image size (`RandResizedCrop`, here); horizontal flip (MONAI
    `RandFlip`); with p 0.8 a colour jitter in random order (MONAI `OneOf` + `RandomOrder`) of brightness (MONAI
    `RandShiftIntensity`, +-0.4 std), contrast (MONAI `RandScaleIntensityFixedMean`, factor 0.6-1.4) and, for
    3 channels, saturation (`RandSaturation`, here, factor 0.6-1.4); random grayscale with p 0.2 for 3 channels
    (`RandGrayscale`, here); Gaussian blur with p 0.5 (`RandGaussianBlur`, here).

Written here, and why:
* `RandSaturation`, `RandGrayscale`: MONAI has no colour transforms (it targets mostly single-channel medical images).
  Both use the ITU-R 601 luma weights on the standardised channels (the site's raw statistics are not at hand),
  which keeps grey standardised pixels grey.
* `RandResizedCrop`: MONAI's `RandSpatialCrop`/`RandScaleCrop` draw each side independently; SimSiam's crop draws
  the area (scale 0.2-1.0) and a log-uniform aspect ratio (3/4-4/3). The aspect ratio is taken relative to the
  strip's own (so a 28x14 strip is not stretched 2x), which is torchvision's rule on the papers' square images.
  Cropping is slicing and resizing is bilinear `F.interpolate` (MONAI's `Resize` costs ~4x more per image).
* `RandGaussianBlur`, `RandSharpness`, `RandAffine2d`: cheaper equivalents of MONAI's `RandGaussianSmooth`,
  `RandGaussianSharpen` and `RandAffine`/`RandRotate`, which cost 1.5-4 ms per tiny strip (kernel and grid
  construction, type conversions) against ~0.05-0.2 ms here. `RandSharpness` is also PIL's `ImageEnhance.Sharpness`
  (blend with the 3x3 SMOOTH filter), which FixMatch uses, rather than MONAI's unsharp mask.

Per image: every view runs its transforms on one image at a time (MONAI transforms are per image, channel first).
Determinism: each call draws one seed from the caller's torch.Generator and re-seeds with it the one numpy
RandomState that all of the view's MONAI (and local) transforms draw from, so the same generator seed gives
bit-identical views. MONAI's metadata tracking is switched off during the call (it costs ~10x on tiny images);
outputs are plain float32 tensors.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from monai.data import get_track_meta, set_track_meta
from monai.transforms import (
    Compose,
    Identity,
    OneOf,
    RandAdjustContrast,
    RandCoarseDropout,
    RandFlip,
    RandHistogramShift,
    RandomizableTransform,
    RandomOrder,
    RandScaleIntensityFixedMean,
    RandShiftIntensity,
    RandSpatialCrop,
    SomeOf,
    SpatialPad,
)
from monai.transforms.transform import Randomizable

from vflflare.data.image_batch import ImageBatch
from vflflare.ssl.augment import TwoViews, WeakStrongViews

ImageTransform = Callable[[torch.Tensor], torch.Tensor]  # one channel-first image [C, H, W] -> [C, H', W']

_LUMA = (0.299, 0.587, 0.114)  # ITU-R 601-2, as PIL's convert("L") and torchvision's rgb_to_grayscale


# --- Running per-image transforms over a batch -----------------------------------------------------------


@contextmanager
def _without_meta_tracking():
    """MONAI wraps tensors into MetaTensors and records every op unless told not to; on 1x28x14 strips that costs
    about ten times the op itself. The flag is MONAI's global, so it is restored afterwards."""
    previous = get_track_meta()
    set_track_meta(False)
    try:
        yield
    finally:
        set_track_meta(previous)


class PerImage:
    """ImageBatch -> ImageBatch: `transforms` (per-image, channel first) run in order on each image of the batch.

    Once per call a seed is drawn from `generator` and re-seeds the numpy RandomState that every randomisable
    transform (MONAI's draw from their `R`) shares, so all randomness comes from the caller's generator.
    `prepare`, if given, is a deterministic step on the whole [n, C, H, W] tensor before the per-image ones
    (e.g. padding once instead of n times).
    Input images are never modified (some MONAI ops, e.g. RandCoarseDropout, write in place)."""

    def __init__(
        self,
        transforms: Sequence[ImageTransform],
        generator: torch.Generator,
        channels: int,
        image_size: tuple[int, int],
        prepare: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.transforms = list(transforms)
        self.generator = generator
        self.channels = channels
        self.image_size = tuple(image_size)
        self.prepare = prepare
        # one numpy RandomState shared by all transforms (they run one after another, so the order of draws is
        # fixed), re-seeded from the torch generator on every call: cheaper than a RandomState per transform
        self._state = np.random.RandomState(0)
        for transform in self.transforms:
            _share_random_state(transform, self._state)

    def _seed(self) -> None:
        self._state.seed(int(torch.randint(2**31 - 1, (1,), generator=self.generator)))

    def __call__(self, batch: ImageBatch) -> ImageBatch:
        images = batch.images
        expected = (self.channels, *self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(f"expected images of shape [n, {', '.join(map(str, expected))}], got {list(images.shape)}")
        self._seed()
        if images.shape[0] == 0:
            return ImageBatch(images.to(torch.float32).clone())
        images = images.to(torch.float32)
        with _without_meta_tracking():
            if self.prepare is not None:
                images = self.prepare(images)
            out = []
            for image in images:
                image = image.clone()
                for transform in self.transforms:
                    image = transform(image)
                out.append(torch.as_tensor(image))
        return ImageBatch(torch.stack(out).to(torch.float32).contiguous())


def _share_random_state(transform: Any, state: np.random.RandomState) -> None:
    """Give `transform` (and, inside MONAI Compose/OneOf/SomeOf/RandomOrder, every transform it holds) `state`;
    Compose.set_random_state would instead seed a new RandomState per child."""
    if isinstance(transform, Compose):
        Randomizable.set_random_state(transform, state=state)
        for inner in transform.transforms:
            _share_random_state(inner, state)
    elif isinstance(transform, Randomizable):
        transform.set_random_state(state=state)


class _ReflectPadBatch:
    """MONAI SpatialPad (reflect) on the whole batch at once, images and channels folded into MONAI's channel axis."""

    def __init__(self, pad: tuple[int, int]) -> None:
        self.pad = pad

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        n, c, h, w = images.shape
        size = (h + 2 * self.pad[0], w + 2 * self.pad[1])
        padded = SpatialPad(size, mode="reflect")(images.reshape(n * c, h, w))
        return torch.as_tensor(padded).reshape(n, c, *size)


# --- Transforms MONAI lacks (or has only at many times the cost on tiny images) -----------------------------


def _check_rgb(image: torch.Tensor, name: str) -> None:
    if image.shape[0] != 3:
        raise ValueError(f"{name} needs 3 channels, got {image.shape[0]}")


def _luma(image: torch.Tensor) -> torch.Tensor:
    """[1, H, W] luma of a [3, H, W] image."""
    return (image[0:1] * _LUMA[0]).add_(image[1:2], alpha=_LUMA[1]).add_(image[2:3], alpha=_LUMA[2])


def _factor_range(factors: tuple[float, float], name: str) -> tuple[float, float]:
    low, high = float(factors[0]), float(factors[1])
    if low > high:
        raise ValueError(f"{name}: range must be (low, high), got {factors}")
    return low, high


class _RandFactor(RandomizableTransform):
    """A transform with one random strength f ~ U(factors), drawn with probability `prob`."""

    def __init__(self, factors: tuple[float, float], prob: float, name: str) -> None:
        RandomizableTransform.__init__(self, prob)
        self.factors = _factor_range(factors, name)
        self.factor = 1.0

    def randomize(self, data: Any = None) -> None:
        super().randomize(None)
        if self._do_transform:
            self.factor = float(self.R.uniform(*self.factors))


class RandSaturation(_RandFactor):
    """Colour (saturation) jitter of a 3-channel image: x -> g + s (x - g) with g its luma and s ~ U(factors);
    the formula of PIL's ImageEnhance.Color (FixMatch's Color) and torchvision's saturation jitter (SimSiam).
    MONAI has no colour transforms, hence written here."""

    def __init__(self, factors: tuple[float, float] = (0.6, 1.4), prob: float = 1.0) -> None:
        super().__init__(factors, prob, "saturation")

    def __call__(self, image: torch.Tensor, randomize: bool = True) -> torch.Tensor:
        _check_rgb(image, "RandSaturation")
        if randomize:
            self.randomize()
        if not self._do_transform:
            return image
        gray = _luma(image)
        return gray + self.factor * (image - gray)


class RandGrayscale(RandomizableTransform):
    """With probability `prob`, every channel of a 3-channel image becomes its luma (torchvision's
    RandomGrayscale, SimSiam p = 0.2). MONAI has no colour transforms, hence written here."""

    def __init__(self, prob: float = 0.2) -> None:
        RandomizableTransform.__init__(self, prob)

    def __call__(self, image: torch.Tensor, randomize: bool = True) -> torch.Tensor:
        _check_rgb(image, "RandGrayscale")
        if randomize:
            self.randomize(None)
        if not self._do_transform:
            return image
        return _luma(image).expand(3, -1, -1).clone()


def _reflect_index(index: np.ndarray, n: int) -> np.ndarray:
    """Indices outside [0, n) mirrored without repeating the edge ('reflect', as numpy/torch padding)."""
    if n == 1:
        return np.zeros_like(index)
    period = 2 * (n - 1)
    index = np.mod(index, period)
    return np.where(index >= n, period - index, index)


def _gaussian_matrix(n: int, sigma: float) -> torch.Tensor:
    """[n, n] matrix M with M @ signal = the signal blurred by a Gaussian (reflect borders, truncated at 4 sigma,
    as MONAI's GaussianFilter). Built in numpy: a few small array ops instead of a convolution call."""
    radius = max(1, int(math.ceil(4.0 * sigma)))
    taps = np.arange(-radius, radius + 1)
    kernel = np.exp(-0.5 * (taps / sigma) ** 2)
    kernel /= kernel.sum()
    columns = _reflect_index(np.arange(n)[:, None] + taps[None, :], n)
    flat = (np.arange(n)[:, None] * n + columns).ravel()
    weights = np.bincount(flat, weights=np.tile(kernel, n), minlength=n * n)
    return torch.from_numpy(weights.reshape(n, n).astype(np.float32))


class RandGaussianBlur(RandomizableTransform):
    """Isotropic Gaussian blur with sigma ~ U(sigma) (SimSiam/SimCLR's GaussianBlur), with probability `prob`.
    The same filter as MONAI's RandGaussianSmooth, written as two small matrix products because MONAI's
    separable convolution costs ~1.5 ms per tiny strip against ~0.05 ms here."""

    def __init__(self, sigma: tuple[float, float] = (0.1, 2.0), prob: float = 0.5) -> None:
        RandomizableTransform.__init__(self, prob)
        self.sigma = _factor_range(sigma, "sigma")
        if self.sigma[0] <= 0:
            raise ValueError(f"sigma must be positive, got {sigma}")
        self.sigma_value = self.sigma[0]

    def randomize(self, data: Any = None) -> None:
        super().randomize(None)
        if self._do_transform:
            self.sigma_value = float(self.R.uniform(*self.sigma))

    def __call__(self, image: torch.Tensor, randomize: bool = True) -> torch.Tensor:
        if randomize:
            self.randomize()
        if not self._do_transform:
            return image
        rows = _gaussian_matrix(image.shape[-2], self.sigma_value).to(image)
        cols = _gaussian_matrix(image.shape[-1], self.sigma_value).to(image)
        return rows @ image @ cols.T


class RandEqualize(RandHistogramShift):
    """MONAI's RandHistogramShift, except that an image whose range is at float32 rounding level relative to its
    values is returned unchanged, as MONAI returns an exactly constant one. MONAI rescales its control points
    by (max - min); for such an image they collapse to equal float32 values and its piecewise-linear map divides
    by zero, giving inf/NaN pixels. This happens in FixMatch: a weak crop of an all-background MNIST strip that
    the contrast op then scales leaves a range of ~1e-7, and one such view turned a site's training to NaN."""

    def __call__(self, image: torch.Tensor, randomize: bool = True) -> torch.Tensor:
        if randomize:
            self.randomize()
        low, high = float(image.min()), float(image.max())
        if high - low <= 1e-4 * max(1.0, abs(low), abs(high)):
            return image
        return super().__call__(image, randomize=False)


class RandSharpness(_RandFactor):
    """PIL's ImageEnhance.Sharpness as FixMatch's RandAugment uses it: blend with the image smoothed by PIL's 3x3
    SMOOTH kernel ([[1,1,1],[1,5,1],[1,1,1]] / 13, border pixels kept), x -> smooth + f (x - smooth) with
    f ~ U(factors); f < 1 blurs, f > 1 sharpens. Written here: MONAI's RandGaussianSharpen is a different (much
    stronger) unsharp mask and costs ~4 ms per tiny strip."""

    def __init__(self, factors: tuple[float, float] = (0.05, 0.95), prob: float = 1.0) -> None:
        super().__init__(factors, prob, "sharpness")

    def __call__(self, image: torch.Tensor, randomize: bool = True) -> torch.Tensor:
        if randomize:
            self.randomize()
        if not self._do_transform or min(image.shape[-2:]) < 3:
            return image
        box = F.avg_pool2d(image.unsqueeze(0), kernel_size=3, stride=1).squeeze(0) * 9.0
        smooth = image.clone()
        smooth[:, 1:-1, 1:-1] = (box + 4.0 * image[:, 1:-1, 1:-1]) / 13.0
        return smooth + self.factor * (image - smooth)


class RandAffine2d(RandomizableTransform):
    """Random rotation (degrees, uniform in +-rotate), shear (x, y: uniform in +-shear) and translation (x, y:
    uniform in +-translate, fractions of the width/height) about the image centre, bilinear, with pixels from
    outside filled with 0 (the channel mean after standardisation; FixMatch fills with grey).
    The same map as MONAI's RandAffine, written here because MONAI's grid construction and type conversions
    cost 1.3-2 ms per tiny strip against ~0.2 ms for torch's affine_grid/grid_sample."""

    def __init__(
        self,
        rotate: float = 0.0,
        shear: tuple[float, float] = (0.0, 0.0),
        translate: tuple[float, float] = (0.0, 0.0),
        prob: float = 1.0,
    ) -> None:
        RandomizableTransform.__init__(self, prob)
        self.rotate = abs(float(rotate))
        self.shear = (abs(float(shear[0])), abs(float(shear[1])))
        self.translate = (abs(float(translate[0])), abs(float(translate[1])))
        self.params = (0.0, 0.0, 0.0, 0.0, 0.0)

    def _draw(self, magnitude: float) -> float:
        return float(self.R.uniform(-magnitude, magnitude)) if magnitude > 0 else 0.0

    def randomize(self, data: Any = None) -> None:
        super().randomize(None)
        if self._do_transform:
            self.params = (
                self._draw(self.rotate),
                self._draw(self.shear[0]),
                self._draw(self.shear[1]),
                self._draw(self.translate[0]),
                self._draw(self.translate[1]),
            )

    def __call__(self, image: torch.Tensor, randomize: bool = True) -> torch.Tensor:
        if randomize:
            self.randomize()
        if not self._do_transform:
            return image
        degrees, shear_x, shear_y, move_x, move_y = self.params
        height, width = image.shape[-2:]
        cos, sin = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
        # output pixel (x, y) about the centre -> input pixel: rotation @ shear, plus the shift; affine_grid works in
        # [-1, 1] coordinates, x scaled by 2 / width and y by 2 / height, which rescales the off-diagonal terms
        a00, a01 = cos - sin * shear_y, cos * shear_x - sin
        a10, a11 = sin + cos * shear_y, sin * shear_x + cos
        theta = torch.tensor(
            [[[a00, a01 * height / width, 2.0 * move_x], [a10 * width / height, a11, 2.0 * move_y]]],
            dtype=image.dtype,
            device=image.device,
        )
        grid = F.affine_grid(theta, [1, *image.shape], align_corners=False)
        return F.grid_sample(image.unsqueeze(0), grid, mode="bilinear", padding_mode="zeros", align_corners=False)[0]


class RandResizedCrop(Randomizable):
    """SimSiam's random resized crop: a box with area ~ U(scale) of the image and log-uniform aspect ratio in
    `ratio` (relative to the image's own aspect ratio), resized back to `spatial_size` (bilinear); after 10
    failed draws the whole image (torchvision's rule). MONAI's RandSpatialCrop/RandScaleCrop draw each side
    independently, hence the box is drawn here; cropping is slicing, resizing torch's interpolate."""

    def __init__(
        self,
        spatial_size: tuple[int, int],
        scale: tuple[float, float] = (0.2, 1.0),
        ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
    ) -> None:
        self.spatial_size = (int(spatial_size[0]), int(spatial_size[1]))
        self.scale = _factor_range(scale, "scale")
        self.log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        if not 0 < self.scale[0] <= 1.0 or self.log_ratio[0] > self.log_ratio[1]:
            raise ValueError(f"need 0 < scale <= 1 and ratio low <= high, got {scale}, {ratio}")
        self.box = (0, 0, *self.spatial_size)

    def randomize(self, data: tuple[int, int]) -> None:
        height, width = data
        for _ in range(10):
            area = height * width * self.R.uniform(*self.scale)
            aspect = math.exp(self.R.uniform(*self.log_ratio)) * width / height
            crop_w = int(round(math.sqrt(area * aspect)))
            crop_h = int(round(math.sqrt(area / aspect)))
            if 0 < crop_w <= width and 0 < crop_h <= height:
                top = int(self.R.randint(0, height - crop_h + 1))
                left = int(self.R.randint(0, width - crop_w + 1))
                self.box = (top, left, crop_h, crop_w)
                return
        self.box = (0, 0, height, width)

    def __call__(self, image: torch.Tensor, randomize: bool = True) -> torch.Tensor:
        if randomize:
            self.randomize(tuple(image.shape[-2:]))
        top, left, crop_h, crop_w = self.box
        crop = image[:, top : top + crop_h, left : left + crop_w]
        if tuple(crop.shape[-2:]) == self.spatial_size:
            return crop.clone()
        return F.interpolate(crop.unsqueeze(0), size=self.spatial_size, mode="bilinear", align_corners=False)[0]


# --- The view pairs --------------------------------------------------------------------------------------


def _check_shape(channels: int, image_size: tuple[int, int]) -> tuple[int, int]:
    if channels < 1 or len(image_size) != 2 or min(image_size) < 2:
        raise ValueError(f"need channels >= 1 and an image size of at least 2x2, got {channels}, {image_size}")
    return int(image_size[0]), int(image_size[1])


def _translation_pad(side: int) -> int:
    """Pixels of padding (= largest shift) for a translation of up to 12.5 % of `side`: FixMatch's
    int(0.125 * side) (4 on CIFAR's 32), at least 1 so that small strips (< 8 px) still move."""
    return min(max(1, int(0.125 * side)), side - 1)


def fixmatch_weak_transforms(image_size: tuple[int, int]) -> list[ImageTransform]:
    """FixMatch's weak augmentation per image, after the batch was reflect-padded by `_translation_pad`."""
    return [RandFlip(prob=0.5, spatial_axis=1), RandSpatialCrop(roi_size=image_size, random_size=False)]


def fixmatch_randaugment_ops(channels: int) -> list[ImageTransform]:
    """FixMatch's RandAugment op list as MONAI transforms or the stand-ins above (see the module docstring);
    each op applies with probability 1 and draws its magnitude uniformly from FixMatch's range."""
    ops: list[ImageTransform] = [
        Identity(),
        RandShiftIntensity(offsets=0.9, prob=1.0),  # Brightness
        RandScaleIntensityFixedMean(prob=1.0, factors=(-0.95, -0.05)),  # Contrast: factor 1 + f in [0.05, 0.95]
        RandAdjustContrast(prob=1.0, gamma=(0.5, 2.0)),  # AutoContrast / Solarize / Posterize: intensity curve
        RandEqualize(num_control_points=(4, 10), prob=1.0),  # Equalize: histogram remap
        RandSharpness(factors=(0.05, 0.95)),  # Sharpness
        RandAffine2d(rotate=30.0),  # Rotate
        RandAffine2d(shear=(0.3, 0.0)),  # ShearX
        RandAffine2d(shear=(0.0, 0.3)),  # ShearY
        RandAffine2d(translate=(0.3, 0.0)),  # TranslateX
        RandAffine2d(translate=(0.0, 0.3)),  # TranslateY
    ]
    if channels == 3:
        ops.append(RandSaturation(factors=(0.05, 0.95)))  # Color
    return ops


def fixmatch_image_views(channels: int, image_size: tuple[int, int], generator: torch.Generator) -> WeakStrongViews:
    """FixMatch's (weak, strong) pair for a site's image strips, as the one-shot VFL paper uses for local SSL:
    pseudo-labels come from the weak view, the consistency loss from the strong one drawn on top of it."""
    size = _check_shape(channels, image_size)
    pad = (_translation_pad(size[0]), _translation_pad(size[1]))
    weak = PerImage(fixmatch_weak_transforms(size), generator, channels, size, prepare=_ReflectPadBatch(pad))
    hole = max(1, min(size) // 2)
    strong = PerImage(
        [
            SomeOf(fixmatch_randaugment_ops(channels), num_transforms=2, replace=False),
            RandCoarseDropout(holes=1, spatial_size=(hole, hole), fill_value=0.0, prob=1.0),  # Cutout
        ],
        generator,
        channels,
        size,
    )
    return WeakStrongViews(weak, strong)


def _blur_sigma(image_size: tuple[int, int]) -> tuple[float, float]:
    """SimSiam's sigma range (0.1, 2.0) is for 224 px; scaled with the smaller side but never below (0.1, 1.0),
    so that a blur still blurs a 14 px strip without wiping it out."""
    return 0.1, max(1.0, 2.0 * min(image_size) / 224.0)


def contrastive_transforms(channels: int, image_size: tuple[int, int]) -> list[ImageTransform]:
    """SimSiam's augmentation per image (see the module docstring); colour-only steps are skipped for 1 channel."""
    jitter: list[ImageTransform] = [
        RandShiftIntensity(offsets=0.4, prob=1.0),  # brightness
        RandScaleIntensityFixedMean(prob=1.0, factors=0.4),  # contrast: factor in [0.6, 1.4]
    ]
    if channels == 3:
        jitter.append(RandSaturation(factors=(0.6, 1.4)))
    transforms: list[ImageTransform] = [
        RandResizedCrop(image_size, scale=(0.2, 1.0)),
        RandFlip(prob=0.5, spatial_axis=1),
        OneOf([RandomOrder(jitter), Identity()], weights=[0.8, 0.2]),
    ]
    if channels == 3:
        transforms.append(RandGrayscale(prob=0.2))
    transforms.append(RandGaussianBlur(sigma=_blur_sigma(image_size), prob=0.5))
    return transforms


def contrastive_image_views(channels: int, image_size: tuple[int, int], generator: torch.Generator) -> TwoViews:
    """Two independent SimSiam-style views of each strip, for SS-VFL's local contrastive and FedHSSL's
    (non-)contrastive SSL: positives are two augmentations of the same image."""
    size = _check_shape(channels, image_size)
    return TwoViews(PerImage(contrastive_transforms(channels, size), generator, channels, size))
