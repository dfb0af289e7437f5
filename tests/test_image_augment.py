"""Image augmentations (vflflare.ssl.image_augment): FixMatch's weak/strong views and SimSiam-style views."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from monai.data import get_track_meta
from monai.transforms import RandHistogramShift

from vflflare.data.image_batch import ImageBatch
from vflflare.ssl.augment import TwoViews, WeakStrongViews
from vflflare.ssl.image_augment import (
    RandAffine2d,
    RandEqualize,
    RandGaussianBlur,
    RandGrayscale,
    RandResizedCrop,
    RandSaturation,
    RandSharpness,
    contrastive_image_views,
    fixmatch_image_views,
)

# (channels, (height, width)): MNIST and CIFAR halves, quarters and a larger own image
SIZES = [(1, (28, 14)), (1, (14, 14)), (3, (16, 32)), (3, (16, 16)), (1, (14, 28)), (3, (32, 16)), (3, (64, 64))]


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _batch(n: int, channels: int, size: tuple[int, int], seed: int = 1) -> ImageBatch:
    """Standardised-looking images: a smooth random pattern plus noise, roughly zero mean and unit variance."""
    g = _gen(seed)
    coarse = torch.randn(n, channels, max(2, size[0] // 4), max(2, size[1] // 4), generator=g)
    smooth = F.interpolate(coarse, size=size, mode="bilinear", align_corners=False)
    return ImageBatch(smooth + 0.3 * torch.randn(n, channels, *size, generator=g))


def _seeded_state(transform, seed: int = 0):  # noqa: ANN001, ANN202
    transform.set_random_state(seed=seed)
    return transform


@pytest.mark.parametrize("channels,size", SIZES)
def test_views_keep_shape_and_dtype(channels, size):
    batch = _batch(6, channels, size)
    weak, strong = fixmatch_image_views(channels, size, _gen())(batch)
    first, second = contrastive_image_views(channels, size, _gen())(batch)
    for view in (weak, strong, first, second):
        assert isinstance(view, ImageBatch)
        assert view.images.shape == (6, channels, *size)
        assert view.images.dtype == torch.float32
        assert torch.isfinite(view.images).all()


def test_view_types_and_empty_batch():
    fixmatch = fixmatch_image_views(3, (32, 16), _gen())
    contrastive = contrastive_image_views(3, (32, 16), _gen())
    assert isinstance(fixmatch, WeakStrongViews) and isinstance(contrastive, TwoViews)
    empty = ImageBatch(torch.zeros(0, 3, 32, 16))
    for view in (*fixmatch(empty), *contrastive(empty)):
        assert view.images.shape == (0, 3, 32, 16)


def test_views_reject_images_of_another_shape_and_leave_the_input_alone():
    views = fixmatch_image_views(1, (28, 14), _gen())
    with pytest.raises(ValueError, match="shape"):
        views(ImageBatch(torch.zeros(2, 1, 28, 16)))
    with pytest.raises(ValueError, match="shape"):
        views(ImageBatch(torch.zeros(2, 3, 28, 14)))
    batch = _batch(8, 1, (28, 14))
    before = batch.images.clone()
    views(batch)
    contrastive_image_views(1, (28, 14), _gen())(batch)
    assert torch.equal(batch.images, before)
    assert get_track_meta()  # MONAI's global metadata flag is restored


@pytest.mark.parametrize("make", [fixmatch_image_views, contrastive_image_views])
@pytest.mark.parametrize("channels,size", [(1, (28, 14)), (3, (32, 16))])
def test_same_seed_gives_identical_views_and_another_seed_different_ones(make, channels, size):
    batch = _batch(16, channels, size)
    first = make(channels, size, _gen(7))
    second = make(channels, size, _gen(7))
    for _ in range(2):  # successive calls keep drawing from the generator, identically
        a, b = first(batch), second(batch)
        assert torch.equal(a[0].images, b[0].images) and torch.equal(a[1].images, b[1].images)
    other = make(channels, size, _gen(8))(batch)
    assert not torch.equal(a[0].images, other[0].images)
    assert not torch.equal(a[1].images, other[1].images)
    # a fresh draw from the same views differs from the previous one
    again = first(batch)
    assert not torch.equal(a[0].images, again[0].images)


def test_fixmatch_weak_view_is_a_flip_and_a_reflect_padded_shift_of_the_input():
    channels, size = 3, (32, 16)
    pad = (4, 2)  # int(0.125 * side)
    batch = _batch(24, channels, size)
    weak, _ = fixmatch_image_views(channels, size, _gen(3))(batch)
    padded = F.pad(batch.images, (pad[1], pad[1], pad[0], pad[0]), mode="reflect")
    flipped = F.pad(batch.images.flip(-1), (pad[1], pad[1], pad[0], pad[0]), mode="reflect")
    flips = shifts = 0
    for i in range(len(batch.images)):
        found = None
        for name, source in (("same", padded[i]), ("flip", flipped[i])):
            for top in range(2 * pad[0] + 1):
                for left in range(2 * pad[1] + 1):
                    if torch.allclose(source[:, top : top + size[0], left : left + size[1]], weak.images[i]):
                        found = (name, top, left)
        assert found is not None, f"image {i} is no flipped/shifted copy of its input"
        flips += found[0] == "flip"
        shifts += (found[1], found[2]) != pad
    assert 4 <= flips <= 20 and shifts >= 18  # p = 0.5 flips; shifts of 0 in both axes are rare (1/45)


def test_fixmatch_weak_view_changes_images_but_keeps_their_statistics():
    batch = _batch(64, 1, (28, 14))
    weak, _ = fixmatch_image_views(1, (28, 14), _gen(4))(batch)
    changed = (weak.images != batch.images).flatten(1).any(dim=1)
    assert changed.float().mean() > 0.8
    mean_in, mean_out = batch.images.mean(dim=(1, 2, 3)), weak.images.mean(dim=(1, 2, 3))
    std_in, std_out = batch.images.std(dim=(1, 2, 3)), weak.images.std(dim=(1, 2, 3))
    assert (mean_out - mean_in).abs().max() < 0.25
    assert ((std_out / std_in) - 1).abs().max() < 0.25


@pytest.mark.parametrize("channels,size", [(1, (28, 14)), (3, (32, 16)), (3, (64, 64))])
def test_fixmatch_strong_view_differs_from_the_weak_one_and_has_a_cutout_hole(channels, size):
    batch = _batch(32, channels, size)
    weak, strong = fixmatch_image_views(channels, size, _gen(5))(batch)
    assert (strong.images != weak.images).flatten(1).any(dim=1).all()
    hole = min(size) // 2
    zero = (strong.images == 0).all(dim=1, keepdim=True).float()  # [n, 1, H, W]: zero in every channel
    full_windows = F.avg_pool2d(zero, kernel_size=hole, stride=1) == 1.0
    assert full_windows.flatten(1).any(dim=1).all(), "every strong image has a zeroed hole x hole square"
    assert (weak.images == 0).sum() == 0  # the hole is the strong view's, not written into the weak one


def test_fixmatch_strong_view_changes_images_beyond_the_cutout_hole():
    batch = _batch(64, 3, (32, 16))
    weak, strong = fixmatch_image_views(3, (32, 16), _gen(6))(batch)
    outside_zeros = (strong.images - weak.images).abs() * (strong.images != 0)  # the hole (and zero fill) left out
    # two distinct RandAugment ops per image, at most one of them Identity
    assert (outside_zeros.flatten(1).amax(dim=1) > 1e-4).float().mean() > 0.8


def test_random_grayscale_makes_channels_equal_and_needs_three_channels():
    image = torch.randn(3, 16, 8, generator=_gen())
    gray = _seeded_state(RandGrayscale(prob=1.0))(image)
    assert torch.equal(gray[0], gray[1]) and torch.equal(gray[1], gray[2])
    expected = 0.299 * image[0] + 0.587 * image[1] + 0.114 * image[2]
    assert torch.allclose(gray[0], expected, atol=1e-6)
    assert torch.equal(_seeded_state(RandGrayscale(prob=0.0))(image), image)
    with pytest.raises(ValueError, match="3 channels"):
        RandGrayscale(prob=1.0)(torch.randn(1, 16, 8))


def test_saturation_interpolates_between_gray_and_the_image():
    image = torch.randn(3, 16, 8, generator=_gen())
    same = _seeded_state(RandSaturation(factors=(1.0, 1.0)))(image)
    assert torch.allclose(same, image, atol=1e-6)
    gray = _seeded_state(RandSaturation(factors=(0.0, 0.0)))(image)
    assert torch.allclose(gray[0], gray[1], atol=1e-6) and torch.allclose(gray[1], gray[2], atol=1e-6)
    more = _seeded_state(RandSaturation(factors=(1.5, 1.5)))(image)
    assert (more - gray).abs().sum() > (image - gray).abs().sum()


def test_affine_rotation_shear_and_translation_move_pixels_as_specified():
    height, width = 8, 4
    image = torch.arange(height * width, dtype=torch.float32).view(1, height, width) + 1
    rotate = _seeded_state(RandAffine2d(rotate=90.0))
    rotate.params = (90.0, 0.0, 0.0, 0.0, 0.0)
    out = rotate(image, randomize=False)
    # output pixel (x, y) about the centre reads input (cos x - sin y, sin x + cos y) = (-y, x)
    cx, cy = (width - 1) / 2, (height - 1) / 2
    for y in range(height):
        for x in range(width):
            src_x, src_y = -(y - cy) + cx, (x - cx) + cy
            inside = 0 <= src_x <= width - 1 and 0 <= src_y <= height - 1
            expected = image[0, int(round(src_y)), int(round(src_x))] if inside else torch.tensor(0.0)
            assert math.isclose(float(out[0, y, x]), float(expected), abs_tol=1e-4), (y, x)
    shift = RandAffine2d(translate=(0.5, 0.0))
    shift.params = (0.0, 0.0, 0.0, 0.5, 0.0)  # read 2 px further right: content moves 2 px left, zeros fill in
    moved = shift(image, randomize=False)
    assert torch.allclose(moved[0, :, :2], image[0, :, 2:]) and torch.equal(moved[0, :, 2:], torch.zeros(8, 2))
    shear = RandAffine2d(shear=(0.3, 0.0))
    shear.params = (0.0, 0.0, 0.0, 0.0, 0.0)
    assert torch.allclose(shear(image, randomize=False), image, atol=1e-5)


def test_gaussian_blur_keeps_constants_and_smooths_noise():
    constant = torch.full((3, 14, 28), 2.5)
    blur = _seeded_state(RandGaussianBlur(sigma=(1.0, 1.0), prob=1.0))
    assert torch.allclose(blur(constant), constant, atol=1e-5)
    noise = torch.randn(1, 14, 28, generator=_gen())
    smoothed = blur(noise)
    assert smoothed.std() < 0.6 * noise.std()
    assert abs(float(smoothed.mean() - noise.mean())) < 0.05
    assert torch.equal(_seeded_state(RandGaussianBlur(prob=0.0))(noise), noise)


def test_sharpness_factor_one_is_identity_and_zero_smooths():
    image = torch.randn(1, 16, 8, generator=_gen())
    assert torch.allclose(_seeded_state(RandSharpness(factors=(1.0, 1.0)))(image), image, atol=1e-6)
    smooth = _seeded_state(RandSharpness(factors=(0.0, 0.0)))(image)
    assert torch.equal(smooth[:, 0], image[:, 0])  # border kept, as PIL does
    assert smooth[:, 1:-1, 1:-1].std() < image[:, 1:-1, 1:-1].std()


def test_random_resized_crop_draws_boxes_of_the_requested_area_and_resizes_back():
    crop = _seeded_state(RandResizedCrop((28, 14), scale=(0.2, 1.0)))
    areas = []
    for _ in range(300):
        crop.randomize((28, 14))
        top, left, h, w = crop.box
        assert 0 <= top and top + h <= 28 and 0 <= left and left + w <= 14
        areas.append(h * w / (28 * 14))
        relative_ratio = (w / h) / (14 / 28)
        assert 0.5 < relative_ratio < 2.0  # 3/4-4/3 up to rounding on a small grid
    areas = np.array(areas)
    assert areas.min() >= 0.12 and areas.max() <= 1.0 and 0.45 < areas.mean() < 0.75
    out = crop(torch.randn(1, 28, 14, generator=_gen()))
    assert out.shape == (1, 28, 14)


@pytest.mark.parametrize("channels,size", [(1, (28, 14)), (3, (32, 16))])
def test_contrastive_views_differ_from_each_other_and_from_the_input(channels, size):
    batch = _batch(32, channels, size)
    first, second = contrastive_image_views(channels, size, _gen(9))(batch)
    assert (first.images != second.images).flatten(1).any(dim=1).all()
    assert (first.images != batch.images).flatten(1).any(dim=1).float().mean() > 0.9


def test_contrastive_views_turn_some_colour_images_gray():
    batch = _batch(200, 3, (16, 16))
    first, _ = contrastive_image_views(3, (16, 16), _gen(10))(batch)
    equal = (first.images[:, 0] - first.images[:, 1]).abs().flatten(1).amax(dim=1) < 1e-5
    assert 15 <= int(equal.sum()) <= 70  # p = 0.2 of 200


def test_per_image_runner_never_writes_into_the_callers_images():
    from monai.transforms import RandCoarseDropout  # writes its hole in place into the array it is given

    from vflflare.ssl.image_augment import PerImage

    batch = _batch(4, 1, (8, 8))
    before = batch.images.clone()
    out = PerImage([RandCoarseDropout(holes=1, spatial_size=4, fill_value=0.0, prob=1.0)], _gen(), 1, (8, 8))(batch)
    assert torch.equal(batch.images, before)
    assert ((out.images == 0).flatten(1).sum(dim=1) == 16).all()


@pytest.mark.parametrize("level, wobble", [(2.8, 1e-7), (-0.42, 1e-8), (0.0, 0.0)])
def test_equalize_leaves_a_nearly_flat_strip_alone_where_monai_gives_nan(level, wobble):
    """A strip whose range is at float32 rounding level (a flat crop after a contrast op) made MONAI's
    RandHistogramShift divide by zero: NaN pixels that turned a site's FixMatch run to NaN."""
    strip = torch.full((1, 28, 14), level) + wobble * torch.randn(1, 28, 14, generator=_gen())
    if wobble:
        monai = _seeded_state(RandHistogramShift(num_control_points=(4, 10), prob=1.0))
        assert any(not torch.isfinite(torch.as_tensor(monai(strip))).all() for _ in range(50))
    ours = _seeded_state(RandEqualize(num_control_points=(4, 10), prob=1.0))
    for _ in range(50):
        assert torch.equal(ours(strip), strip)


def test_equalize_remaps_an_ordinary_image_as_monai_does():
    image = _batch(1, 3, (32, 16)).images[0]
    monai = _seeded_state(RandHistogramShift(num_control_points=(4, 10), prob=1.0))
    ours = _seeded_state(RandEqualize(num_control_points=(4, 10), prob=1.0))
    for _ in range(5):
        expected = torch.as_tensor(monai(image))
        assert torch.equal(ours(image), expected) and not torch.equal(expected, image)


def test_strong_views_of_nearly_flat_strips_stay_finite():
    flat = ImageBatch(torch.full((64, 1, 28, 14), 2.8) + 1e-7 * torch.randn(64, 1, 28, 14, generator=_gen()))
    views = fixmatch_image_views(1, (28, 14), _gen())
    for _ in range(5):
        weak, strong = views(flat)
        assert torch.isfinite(weak.images).all() and torch.isfinite(strong.images).all()
