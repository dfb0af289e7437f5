"""Image augmentations (vflflare.ssl.image_augment): FixMatch's weak/strong views and SimSiam-style views, batched."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vflflare.data.image_batch import ImageBatch
from vflflare.ssl.augment import TwoViews, WeakStrongViews
from vflflare.ssl.image_augment import (
    UNIFORMS,
    SimSiamDraw,
    StrongDraw,
    adjust_saturation,
    affine_warp,
    blend_sharpness,
    color_jitter,
    contrastive_image_views,
    draw_resized_crop_boxes,
    fixmatch_image_views,
    gaussian_blur,
    histogram_control_points,
    histogram_shift,
    resized_crop,
    scale_contrast,
    shift_brightness,
    to_grayscale,
)

# (channels, (height, width)): MNIST and CIFAR halves, quarters and a larger own image
SIZES = [(1, (28, 14)), (1, (14, 14)), (3, (16, 32)), (3, (16, 16)), (1, (14, 28)), (3, (32, 16)), (3, (64, 64))]
DRAWS = 4000  # images per distribution test: a rate p is off by more than 0.035 with probability < 1e-5


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _batch(n: int, channels: int, size: tuple[int, int], seed: int = 1) -> ImageBatch:
    """Standardised-looking images: a smooth random pattern plus noise, roughly zero mean and unit variance."""
    g = _gen(seed)
    coarse = torch.randn(n, channels, max(2, size[0] // 4), max(2, size[1] // 4), generator=g)
    smooth = F.interpolate(coarse, size=size, mode="bilinear", align_corners=False)
    return ImageBatch(smooth + 0.3 * torch.randn(n, channels, *size, generator=g))


def _roughly_uniform(values: torch.Tensor, count: int) -> None:
    """`values` (integers 0..count-1) hit every value, each within 25 % of its expected frequency."""
    frequency = torch.bincount(values, minlength=count).float() / len(values)
    assert len(frequency) == count
    assert (frequency - 1 / count).abs().max() < 0.25 / count, frequency


# --- The views end to end ------------------------------------------------------------------------------------


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
    with pytest.raises(ValueError, match="shape"):
        contrastive_image_views(1, (28, 14), _gen())(ImageBatch(torch.zeros(28, 14)))
    batch = _batch(64, 1, (28, 14))
    before = batch.images.clone()
    views(batch)
    views.strong_on_weak(batch)  # every RandAugment op runs on some of the 64 images
    contrastive_image_views(1, (28, 14), _gen())(batch)
    assert torch.equal(batch.images, before)


def test_the_module_does_not_import_monai():
    """MONAI costs ~1.6 s per process; the views are plain torch now."""
    code = "import sys, vflflare.ssl.image_augment; assert 'monai' not in sys.modules, 'monai imported'"
    custom = Path(__file__).resolve().parents[1] / "custom"
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(custom)})


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


# --- FixMatch's weak view --------------------------------------------------------------------------------------


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
                    if torch.equal(source[:, top : top + size[0], left : left + size[1]], weak.images[i]):
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


def test_fixmatch_weak_draws_flip_half_the_images_and_shift_uniformly_over_the_whole_range():
    weak = fixmatch_image_views(3, (32, 16), _gen(11)).weak
    drawn = weak.draw(DRAWS)
    assert abs(drawn.flip.float().mean() - 0.5) < 0.035
    _roughly_uniform(drawn.top, 2 * 4 + 1)  # offsets 0..8 in the padded image: shifts -4..4 rows
    _roughly_uniform(drawn.left, 2 * 2 + 1)  # shifts -2..2 columns
    # flip and shifts independent: the flipped images' shifts are still centred
    assert abs(drawn.top[drawn.flip].float().mean() - 4) < 0.3


# --- FixMatch's strong view ------------------------------------------------------------------------------------


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


@pytest.mark.parametrize("channels", [1, 3])
def test_randaugment_draws_two_distinct_ops_per_image_each_equally_often(channels):
    strong = fixmatch_image_views(channels, (32, 16), _gen(12)).strong_on_weak
    count = len(strong.ops)
    assert count == (12 if channels == 3 else 11)
    drawn = strong.draw(DRAWS)
    assert (drawn.ops[:, 0] != drawn.ops[:, 1]).all(), "an op twice for one image"
    assert drawn.ops.min() >= 0 and drawn.ops.max() < count
    has_op = F.one_hot(drawn.ops, count).sum(dim=1).float().mean(dim=0)  # share of images that get op k
    assert (has_op - 2 / count).abs().max() < 0.035, has_op
    _roughly_uniform(drawn.ops[:, 0], count)  # the first op, and the second given the first: any order
    _roughly_uniform(drawn.ops[:, 1], count)
    pairs = drawn.ops[:, 0] * count + drawn.ops[:, 1]
    assert len(torch.unique(pairs)) == count * (count - 1)  # every ordered pair occurs
    u = drawn.uniforms
    assert u.shape == (DRAWS, 2, UNIFORMS) and 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    _roughly_uniform(drawn.hole_top, 32 - 8 + 1)  # the hole lies inside the image, anywhere
    _roughly_uniform(drawn.hole_left, 16 - 8 + 1)


def test_strong_view_applies_each_images_two_ops_in_their_order_and_then_the_hole():
    strong = fixmatch_image_views(3, (32, 16), _gen()).strong_on_weak
    names = [op.name for op in strong.ops]
    images = _batch(4, 3, (32, 16)).images
    n = len(images)
    sharp, rotate, brightness, contrast = (names.index(k) for k in ("Sharpness", "Rotate", "Brightness", "Contrast"))
    ops = torch.tensor([[sharp, rotate], [rotate, sharp], [brightness, contrast], [contrast, brightness]])
    uniforms = torch.full((n, 2, UNIFORMS), 0.9)
    hole = torch.tensor([0, 0, 24, 24]), torch.tensor([0, 8, 0, 8])  # the four corners
    out = strong.apply(images, StrongDraw(ops, uniforms, *hole))
    factor, degrees = torch.tensor([0.05 + 0.9 * 0.9]), torch.tensor([-30 + 60 * 0.9])
    offset = torch.tensor([-0.9 + 1.8 * 0.9])
    zero = torch.zeros(1)

    def rot(x):  # noqa: ANN001, ANN202
        return affine_warp(x, degrees, zero, zero, zero, zero)

    expected = [
        rot(blend_sharpness(images[0:1], factor)),
        blend_sharpness(rot(images[1:2]), factor),
        scale_contrast(shift_brightness(images[2:3], offset), factor),
        shift_brightness(scale_contrast(images[3:4], factor), offset),
    ]
    for i, image in enumerate(expected):
        top, left = int(hole[0][i]), int(hole[1][i])
        keep = torch.ones(32, 16, dtype=torch.bool)
        keep[top : top + 8, left : left + 8] = False
        assert torch.allclose(out[i][:, keep], image[0][:, keep], atol=1e-5), i
        assert (out[i][:, ~keep] == 0).all()
    swapped = strong.apply(images[:1], StrongDraw(ops[1:2], uniforms[:1], hole[0][:1], hole[1][:1]))
    assert not torch.allclose(swapped, out[:1], atol=1e-3)  # the order matters: it is not ignored


def test_strong_views_of_nearly_flat_strips_stay_finite():
    flat = ImageBatch(torch.full((64, 1, 28, 14), 2.8) + 1e-7 * torch.randn(64, 1, 28, 14, generator=_gen()))
    views = fixmatch_image_views(1, (28, 14), _gen())
    for _ in range(5):
        weak, strong = views(flat)
        assert torch.isfinite(weak.images).all() and torch.isfinite(strong.images).all()


# --- The ops, one by one ---------------------------------------------------------------------------------------


def test_grayscale_makes_channels_equal_to_the_luma_and_needs_three_channels():
    images = torch.randn(2, 3, 16, 8, generator=_gen())
    gray = to_grayscale(images)
    assert torch.equal(gray[:, 0], gray[:, 1]) and torch.equal(gray[:, 1], gray[:, 2])
    expected = 0.299 * images[:, 0] + 0.587 * images[:, 1] + 0.114 * images[:, 2]
    assert torch.allclose(gray[:, 0], expected, atol=1e-6)
    with pytest.raises(ValueError, match="3 channels"):
        to_grayscale(torch.randn(1, 1, 16, 8))


def test_saturation_interpolates_between_gray_and_the_image():
    image = torch.randn(1, 3, 16, 8, generator=_gen())
    same, gray, more = adjust_saturation(image.expand(3, -1, -1, -1), torch.tensor([1.0, 0.0, 1.5]))
    assert torch.allclose(same, image[0], atol=1e-6)
    assert torch.allclose(gray[0], gray[1], atol=1e-6) and torch.allclose(gray[1], gray[2], atol=1e-6)
    assert (more - gray).abs().sum() > (image[0] - gray).abs().sum()


def test_contrast_and_brightness_act_per_image_about_the_image_mean():
    images = torch.randn(2, 3, 8, 8, generator=_gen())
    out = scale_contrast(images, torch.tensor([0.5, 1.0]))
    assert torch.allclose(out.mean(dim=(1, 2, 3)), images.mean(dim=(1, 2, 3)), atol=1e-6)
    assert torch.allclose(out[0].std(), 0.5 * images[0].std(), atol=1e-5) and torch.allclose(out[1], images[1])
    assert torch.allclose(shift_brightness(images, torch.tensor([0.3, -0.2]))[1], images[1] - 0.2)


def test_affine_rotation_shear_and_translation_move_pixels_as_specified():
    height, width = 8, 4
    image = torch.arange(height * width, dtype=torch.float32).view(1, 1, height, width) + 1
    zero = torch.zeros(1)
    out = affine_warp(image, torch.tensor([90.0]), zero, zero, zero, zero)[0]
    # output pixel (x, y) about the centre reads input (cos x - sin y, sin x + cos y) = (-y, x)
    cx, cy = (width - 1) / 2, (height - 1) / 2
    for y in range(height):
        for x in range(width):
            src_x, src_y = -(y - cy) + cx, (x - cx) + cy
            inside = 0 <= src_x <= width - 1 and 0 <= src_y <= height - 1
            expected = image[0, 0, int(round(src_y)), int(round(src_x))] if inside else torch.tensor(0.0)
            assert math.isclose(float(out[0, y, x]), float(expected), abs_tol=1e-4), (y, x)
    # read 2 px further right: content moves 2 px left, zeros fill in
    moved = affine_warp(image, zero, zero, zero, torch.tensor([0.5]), zero)[0]
    assert torch.allclose(moved[0, :, :2], image[0, 0, :, 2:]) and torch.equal(moved[0, :, 2:], torch.zeros(8, 2))
    assert torch.allclose(affine_warp(image, zero, zero, zero, zero, zero), image, atol=1e-5)
    # one call, different maps per image: each as if warped alone
    images = torch.randn(3, 2, 10, 6, generator=_gen())
    params = torch.tensor([[20.0, 0.0, 0.0, 0.1, 0.0], [0.0, 0.3, 0.0, 0.0, -0.2], [-10.0, 0.0, -0.2, 0.0, 0.0]])
    together = affine_warp(images, *params.T)
    for i in range(3):
        assert torch.allclose(together[i : i + 1], affine_warp(images[i : i + 1], *params[i : i + 1].T), atol=1e-6)


def _reference_blur(image: torch.Tensor, sigma: float) -> torch.Tensor:
    """A 2-D convolution with the outer product of MONAI's truncated kernel, reflect borders."""
    radius = max(1, math.ceil(4 * sigma))
    taps = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-0.5 * (taps / sigma) ** 2)
    kernel = (kernel / kernel.sum()).float()
    padded = F.pad(image.unsqueeze(0), (radius,) * 4, mode="reflect")
    weight = torch.outer(kernel, kernel).expand(image.shape[0], 1, -1, -1)
    return F.conv2d(padded, weight, groups=image.shape[0])[0]


def test_gaussian_blur_is_a_reflect_bordered_gaussian_per_image_and_keeps_constants():
    images = torch.randn(3, 2, 14, 28, generator=_gen())
    sigmas = torch.tensor([0.3, 1.0, 2.5])
    blurred = gaussian_blur(images, sigmas)
    for i, sigma in enumerate(sigmas.tolist()):
        assert torch.allclose(blurred[i], _reference_blur(images[i], sigma), atol=1e-5), sigma
    assert blurred[1].std() < 0.6 * images[1].std()
    assert abs(float(blurred[1].mean() - images[1].mean())) < 0.05
    constant = torch.full((2, 3, 14, 4), 2.5)  # a kernel wider than the strip reflects more than once
    assert torch.allclose(gaussian_blur(constant, torch.tensor([1.0, 3.0])), constant, atol=1e-5)


def test_sharpness_factor_one_is_identity_and_zero_is_pils_smooth_filter():
    images = torch.randn(2, 1, 16, 8, generator=_gen())
    out = blend_sharpness(images, torch.tensor([1.0, 0.0]))
    assert torch.allclose(out[0], images[0], atol=1e-6)
    smooth = out[1]
    assert torch.equal(smooth[:, 0], images[1, :, 0]) and torch.equal(smooth[:, :, -1], images[1, :, :, -1])
    kernel = torch.tensor([[1.0, 1, 1], [1, 5, 1], [1, 1, 1]]).view(1, 1, 3, 3) / 13
    assert torch.allclose(smooth[:, 1:-1, 1:-1], F.conv2d(images[1:], kernel)[0], atol=1e-6)


def test_random_resized_crop_boxes_have_simsiams_area_and_aspect_and_fit_the_image():
    size = (28, 14)
    top, left, h, w = draw_resized_crop_boxes(torch.rand(DRAWS, 22, generator=_gen(), dtype=torch.float64), size)
    assert (top >= 0).all() and (top + h <= 28).all() and (left >= 0).all() and (left + w <= 14).all()
    # the drawn area is in [0.2, 1] of the image; each side is rounded by at most half a pixel
    assert ((h + 0.5) * (w + 0.5) >= 0.2 * 28 * 14).all() and ((h - 0.5) * (w - 0.5) <= 28 * 14).all()
    relative_ratio = (w / h) / (14 / 28)
    assert (relative_ratio > 0.5).all() and (relative_ratio < 2.0).all()  # 3/4-4/3 up to rounding on a small grid
    # on a large image rounding hardly matters: areas cover [0.2, 1], uniformly where no draw is rejected
    top, left, h, w = draw_resized_crop_boxes(torch.rand(DRAWS, 22, generator=_gen(1), dtype=torch.float64), (224, 224))
    area = (h * w).double() / 224**2
    ratio = w / h
    assert area.min() > 0.195 and area.max() <= 1.0 and 0.5 < area.mean() < 0.62
    assert ratio.min() > 0.74 and ratio.max() < 1.35
    low, mid = ((area >= 0.2) & (area < 0.4)).double().mean(), ((area >= 0.4) & (area < 0.6)).double().mean()
    assert 0.2 < low < 0.35 and abs(low - mid) < 0.05
    # positions are uniform over where the box fits: the centres spread over the image
    centre = (left + w / 2) / 224
    assert abs(centre.mean() - 0.5) < 0.02 and centre.min() < 0.25 and centre.max() > 0.75


def test_random_resized_crop_falls_back_to_the_whole_image_when_no_attempt_fits():
    # a box of the whole area with an aspect ratio of 3/4-4/3 never fits (but for rounding): the 10th failure
    # takes the whole image
    top, left, h, w = draw_resized_crop_boxes(
        torch.rand(500, 22, generator=_gen(), dtype=torch.float64), (30, 30), scale=(1.0, 1.0), ratio=(0.75, 0.8)
    )
    assert (top == 0).all() and (left == 0).all() and (h == 30).all() and (w == 30).all()
    # with one attempt in 10 fitting, the first fitting one is taken
    uniforms = torch.full((1, 22), 0.9, dtype=torch.float64)
    uniforms[0, 10:20] = 0.0  # every aspect ratio 0.75: too tall at 95 % of the area...
    uniforms[0, 3], uniforms[0, 7] = 0.0, 0.1  # ... but not at the 4th (area 0.5) and 8th attempt (area 0.55)
    top, left, h, w = draw_resized_crop_boxes(uniforms, (30, 30), scale=(0.5, 1.0), ratio=(0.75, 0.8))
    assert (int(h), int(w)) == (round(math.sqrt(450 / 0.75)), round(math.sqrt(450 * 0.75)))


def test_resized_crop_is_torchs_bilinear_resize_of_the_box_and_the_flip_mirrors_it():
    images = torch.randn(4, 3, 28, 14, generator=_gen())
    top, left = torch.tensor([0, 5, 3, 0]), torch.tensor([0, 2, 7, 0])
    height, width = torch.tensor([28, 12, 20, 28]), torch.tensor([14, 9, 7, 14])
    flip = torch.tensor([False, False, True, True])
    out = resized_crop(images, top, left, height, width, flip)
    for i in range(4):
        box = images[i : i + 1, :, top[i] : top[i] + height[i], left[i] : left[i] + width[i]]
        expected = F.interpolate(box, size=(28, 14), mode="bilinear", align_corners=False)[0]
        expected = expected.flip(-1) if flip[i] else expected
        assert torch.allclose(out[i], expected, atol=1e-5), i
    assert torch.equal(out[0], images[0])  # the whole image, unflipped, is read back exactly


def test_color_jitter_closed_form_equals_the_three_ops_applied_in_each_order():
    images = _batch(2, 3, (16, 8)).images
    brightness, contrast, saturation = torch.tensor([0.3, -0.2]), torch.tensor([0.6, 1.3]), torch.tensor([1.4, 0.7])
    ops = {
        "b": lambda x: shift_brightness(x, brightness),
        "c": lambda x: scale_contrast(x, contrast),
        "s": lambda x: adjust_saturation(x, saturation),
    }
    for order in itertools.permutations("bcs"):
        expected = images
        for name in order:
            expected = ops[name](expected)
        saturation_first = torch.full((2,), order.index("s") < order.index("c"))
        out = color_jitter(images, brightness, contrast, saturation, saturation_first)
        assert torch.allclose(out, expected, atol=1e-5), order
    first, last = (
        color_jitter(images, brightness, contrast, saturation, torch.full((2,), flag)) for flag in (True, False)
    )
    assert not torch.allclose(first, last, atol=1e-3)  # whether saturation precedes contrast matters
    gray = _batch(2, 1, (16, 8)).images
    expected = shift_brightness(scale_contrast(gray, contrast), brightness)
    out = color_jitter(gray, brightness, contrast, None, torch.tensor([True, False]))
    assert torch.allclose(out, expected, atol=1e-6)


@pytest.mark.parametrize("level, wobble", [(2.8, 1e-7), (-0.42, 1e-8), (0.0, 0.0)])
def test_equalize_leaves_a_nearly_flat_strip_alone(level, wobble):
    """A strip whose range is at float32 rounding level (a flat crop after a contrast op) made MONAI's
    RandHistogramShift divide by zero: NaN pixels that turned a site's FixMatch run to NaN."""
    strip = torch.full((1, 28, 14), level) + wobble * torch.randn(1, 28, 14, generator=_gen())
    points, count = histogram_control_points(torch.rand(50, generator=_gen()), torch.rand(50, 8, generator=_gen(1)))
    ours = histogram_shift(strip.expand(50, -1, -1, -1), points, count)
    assert torch.equal(ours, strip.expand(50, -1, -1, -1))


def test_equalize_remaps_each_image_through_its_own_curve_as_monai_does():
    """MONAI's RandHistogramShift: control points scaled to the image's [min, max], then np.interp."""
    images = _batch(6, 3, (32, 16)).images
    points, count = histogram_control_points(torch.rand(6, generator=_gen()), torch.rand(6, 8, generator=_gen(1)))
    assert len(set(count.tolist())) > 2
    out = histogram_shift(images, points, count)
    for image, curve, k, remapped in zip(images.double().numpy(), points.double().numpy(), count.tolist(), out):
        low, high = image.min(), image.max()
        reference = np.linspace(0, 1, k) * (high - low) + low
        expected = np.interp(image, reference, curve[:k] * (high - low) + low)
        assert np.allclose(remapped.numpy(), expected, atol=1e-5) and not np.allclose(expected, image, atol=1e-3)


def test_equalize_control_points_follow_monais_rule():
    count_u, point_u = torch.rand(DRAWS, generator=_gen()), torch.rand(DRAWS, 8, generator=_gen(1))
    points, count = histogram_control_points(count_u, point_u)
    _roughly_uniform(count - 4, 7)  # 4..10 points
    assert (points[:, 0] == 0).all() and (points[:, 1:].diff(dim=1) >= 0).all()  # moved points stay in order
    assert (points.gather(1, (count - 1).unsqueeze(1)) == 1).all()
    # with 4 points: point 1 ~ U(0, 2/3), point 2 ~ U(point 1, 1), so means 1/3 and 2/3
    four, _ = histogram_control_points(torch.zeros(DRAWS), point_u)
    assert abs(four[:, 1].mean() - 1 / 3) < 0.015 and abs(four[:, 2].mean() - 2 / 3) < 0.015
    assert four[:, 1].max() <= 2 / 3 + 1e-6


# --- SimSiam's views -------------------------------------------------------------------------------------------


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


def test_simsiam_draws_each_step_at_its_rate():
    view = contrastive_image_views(3, (32, 16), _gen(13)).transform_a
    drawn = view.draw(DRAWS)
    for name, rate in (("flip", 0.5), ("jitter", 0.8), ("gray", 0.2), ("blur", 0.5), ("saturation_first", 0.5)):
        assert abs(getattr(drawn, name).float().mean() - rate) < 0.035, name
    for name, low, high in (
        ("brightness", -0.4, 0.4),
        ("contrast", 0.6, 1.4),
        ("saturation", 0.6, 1.4),
        ("sigma", 0.1, 1.0),
    ):
        values = getattr(drawn, name)
        assert values.min() >= low and values.max() <= high, name
        assert abs(values.mean() - (low + high) / 2) < 0.03 * (high - low), name
    assert abs((drawn.jitter & drawn.blur).float().mean() - 0.4) < 0.035  # drawn independently
    area = (drawn.height * drawn.width).float() / (32 * 16)
    assert area.min() > 0.15 and area.max() <= 1 and 0.5 < area.mean() < 0.65


def test_simsiam_view_applies_crop_flip_jitter_gray_and_blur_where_drawn():
    view = contrastive_image_views(3, (32, 16), _gen()).transform_a
    images = _batch(4, 3, (32, 16)).images
    on = torch.tensor([False, True, True, False])
    box = (
        torch.tensor([0, 2, 4, 0]),
        torch.tensor([0, 1, 3, 0]),
        torch.tensor([32, 20, 24, 32]),
        torch.tensor([16, 12, 10, 16]),
    )
    values = {
        "brightness": torch.full((4,), 0.2),
        "contrast": torch.full((4,), 1.3),
        "saturation": torch.full((4,), 0.7),
        "sigma": torch.full((4,), 0.8),
    }
    drawn = SimSiamDraw(*box, flip=on, jitter=on, saturation_first=on, gray=on, blur=on, **values)
    out = view.apply(images, drawn)
    assert torch.equal(out[0], images[0]) and torch.equal(out[3], images[3])  # every step off, the whole image
    expected = resized_crop(images[1:3], *(b[1:3] for b in box), on[1:3])
    expected = color_jitter(
        expected, values["brightness"][:2], values["contrast"][:2], values["saturation"][:2], on[1:3]
    )
    expected = gaussian_blur(to_grayscale(expected), values["sigma"][:2])
    assert torch.allclose(out[1:3], expected, atol=1e-5)
