"""Images: strip geometry, the image split, and a site's own image files (MONAI loading and its errors)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import SHARED_DATA
from PIL import Image

from vflflare.cli import main as cli_main
from vflflare.data.errors import DataError
from vflflare.data.image_sources import ImageSource
from vflflare.data.loading import DataRequest
from vflflare.data.split.images import cut_strips, split_images, strip_boxes
from vflflare.protocol.views import ImageView, load_site_view

SITES = ["site-1", "site-2"]


@pytest.mark.parametrize(
    "n_sites, height, width", [(2, 28, 28), (4, 28, 28), (2, 32, 32), (4, 32, 32), (9, 28, 28), (2, 7, 5), (4, 7, 5)]
)
def test_strips_put_back_together_give_the_image(n_sites, height, width):
    images = np.random.default_rng(0).integers(0, 256, (3, height, width, 3), dtype=np.uint8)
    strips = cut_strips(images, n_sites)
    side = int(round(np.sqrt(n_sites))) if n_sites != 2 else 1
    grid = [strips[r * (n_sites // side) : (r + 1) * (n_sites // side)] for r in range(side)]
    rebuilt = np.concatenate([np.concatenate(row, axis=2) for row in grid], axis=1)
    np.testing.assert_array_equal(rebuilt, images)
    assert sum((b - t) * (r - left) for t, b, left, r in strip_boxes(n_sites, height, width)) == height * width


def test_halves_are_left_and_right_and_quadrants_row_major():
    assert strip_boxes(2, 28, 28) == [(0, 28, 0, 14), (0, 28, 14, 28)]
    assert strip_boxes(4, 32, 32) == [(0, 16, 0, 16), (0, 16, 16, 32), (16, 32, 0, 16), (16, 32, 16, 32)]
    with pytest.raises(ValueError, match="halves .2 sites. or a square grid"):
        strip_boxes(3, 28, 28)


def _source(n_train=120, n_test=40, size=(8, 6), channels=1) -> ImageSource:
    rng = np.random.default_rng(1)
    return ImageSource(
        rng.integers(0, 256, (n_train, *size, channels), dtype=np.uint8),
        rng.integers(0, 10, n_train),
        rng.integers(0, 256, (n_test, *size, channels), dtype=np.uint8),
        rng.integers(0, 10, n_test),
        10,
    )


def test_image_split_shares_aligned_rows_spreads_the_rest_and_keeps_the_test_set():
    source = _source()
    result, strips, schemas = split_images(source, "toy", SITES, overlap=20, seed=3)
    ids = {site: list(result.parts[site].train["id"]) for site in SITES}
    aligned = set(result.overlap_ids)
    assert len(aligned) == 20 and all(aligned <= set(ids[s]) for s in SITES)
    unaligned = [set(ids[s]) - aligned for s in SITES]
    assert not unaligned[0] & unaligned[1] and len(unaligned[0]) + len(unaligned[1]) == 100
    assert abs(len(unaligned[0]) - len(unaligned[1])) <= 1
    assert list(result.train_labels["id"]) == sorted(aligned) and len(result.test_labels) == 40
    for k, site in enumerate(SITES):
        assert schemas[site].image_size == (8, 3) and strips[site]["train"].shape == (len(ids[site]), 8, 3, 1)
        rows = [int(i.rsplit("-", 1)[1]) for i in ids[site]]
        np.testing.assert_array_equal(strips[site]["train"], cut_strips(source.train_images[rows], 2)[k])
    again, _, _ = split_images(source, "toy", SITES, overlap=20, seed=3)
    assert again.overlap_ids == result.overlap_ids


@pytest.mark.needs_data("mnist")
def test_split_cli_writes_what_a_site_holds_and_the_site_reads_it_back(tmp_path):
    out = tmp_path / "mnist"
    code = cli_main(
        [
            "split",
            "--dataset",
            "mnist",
            "--data-dir",
            str(SHARED_DATA),
            "--sites",
            "4",
            "--overlap",
            "50",
            "--seed",
            "0",
            "--train-rows",
            "300",
            "--test-rows",
            "60",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sites"] == [f"site-{k}" for k in range(1, 5)] and manifest["overlap"] == 50
    assert json.loads((out / "site-3" / "schema.json").read_text()) == {
        "id_column": "id",
        "modality": "image",
        "path_column": "path",
        "image_size": [14, 14],
    }
    index = pd.read_csv(out / "site-3" / "train.csv")
    assert list(index.columns) == ["id", "path"] and len(index) == 50 + 62
    first = np.asarray(Image.open(out / "site-3" / index["path"][0]))
    assert first.shape == (14, 14) and first.dtype == np.uint8
    view = load_site_view("site-3", DataRequest(manifest["sites"], str(out)))
    assert isinstance(view, ImageView) and view.channels == 1 and view.size == (14, 14)
    assert view.train_ids == list(index["id"]) and view.num_rows("test") == 60
    pixels = (first / 255.0 - view.images.channel_mean[0]) / view.images.channel_std[0]
    np.testing.assert_allclose(view.batch("train", torch.tensor([0])).images[0, 0].numpy(), pixels, atol=1e-5)
    train = view.images.train
    assert abs(float(train.mean())) < 1e-4 and abs(float(train.std()) - 1) < 1e-2  # standardised on its own images


@pytest.mark.needs_data("mnist")  # the options are checked once the dataset is read
def test_split_rejects_options_that_do_not_apply_to_images(tmp_path, capsys):
    args = ["split", "--dataset", "mnist", "--data-dir", str(SHARED_DATA), "--overlap", "10", "--train-rows", "100"]
    assert cli_main(args + ["--sites", "3", "--out", str(tmp_path / "a")]) == 2
    assert "halves (2 sites) or a square grid" in capsys.readouterr().err
    assert cli_main(args + ["--site-columns", "a;b", "--out", str(tmp_path / "b")]) == 2
    assert "--site-columns applies only to tables" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "split",
                "--dataset",
                "breast_cancer",
                "--overlap",
                "10",
                "--train-rows",
                "100",
                "--out",
                str(tmp_path / "c"),
            ]
        )
        == 2
    )
    assert "apply only to image datasets" in capsys.readouterr().err


# ---------------------------------------------------------------- bring your own images


def _byo_site(root: Path, images: dict[str, np.ndarray], schema: dict | None = None, test: int = 2) -> Path:
    """A site folder with PNG files and train/test indexes; the last `test` images are test rows."""
    folder = root / "site-1"
    (folder / "img").mkdir(parents=True)
    names = list(images)
    for name, pixels in images.items():
        Image.fromarray(pixels).save(folder / "img" / f"{name}.png")
    rows = [{"id": name, "path": f"img/{name}.png"} for name in names]
    pd.DataFrame(rows[:-test]).to_csv(folder / "train.csv", index=False)
    pd.DataFrame(rows[-test:]).to_csv(folder / "test.csv", index=False)
    (folder / "schema.json").write_text(json.dumps(schema or {"modality": "image"}))
    return folder


def _pixels(n: int, size=(10, 8), channels: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (*size, channels) if channels > 1 else size
    return {f"p{i:02d}": rng.integers(0, 256, shape, dtype=np.uint8) for i in range(n)}


def _load(root: Path) -> ImageView:
    return load_site_view("site-1", DataRequest([], str(root)))


def test_own_rgb_images_load_channel_first_in_their_rows(tmp_path):
    images = _pixels(6)
    _byo_site(tmp_path, images)
    view = _load(tmp_path)
    assert view.channels == 3 and view.size == (10, 8) and view.train_ids == ["p00", "p01", "p02", "p03"]
    raw = torch.as_tensor(np.stack(list(images.values()))[:4] / 255.0, dtype=torch.float32).permute(0, 3, 1, 2)
    mean, std = torch.tensor(view.images.channel_mean), torch.tensor(view.images.channel_std)
    torch.testing.assert_close(view.images.train, (raw - mean[:, None, None]) / std[:, None, None], atol=1e-5, rtol=0)


def test_image_size_resizes_mixed_sizes(tmp_path):
    images = {**_pixels(3, size=(10, 8)), **{f"q{i}": v for i, v in enumerate(_pixels(3, size=(20, 16)).values())}}
    _byo_site(tmp_path, images, {"modality": "image", "image_size": [12, 6]})
    view = _load(tmp_path)
    assert view.size == (12, 6) and view.num_rows("train") == 4 and view.num_rows("test") == 2


def test_nifti_images_are_read_and_scaled_by_their_own_range(tmp_path):
    import nibabel

    folder = tmp_path / "site-1"
    folder.mkdir()
    rows = []
    for i in range(4):
        volume = np.random.default_rng(i).normal(100 * i, 5, (12, 9)).astype(np.float32)
        nibabel.save(nibabel.Nifti1Image(volume, np.eye(4)), folder / f"scan{i}.nii.gz")
        rows.append({"id": f"s{i}", "path": f"scan{i}.nii.gz"})
    pd.DataFrame(rows[:3]).to_csv(folder / "train.csv", index=False)
    pd.DataFrame(rows[3:]).to_csv(folder / "test.csv", index=False)
    (folder / "schema.json").write_text('{"modality": "image"}')
    view = _load(tmp_path)
    assert view.channels == 1 and view.size == (12, 9)
    # each scan was scaled to [0, 1] on its own: the offsets of 100 * i do not show in the means
    unscaled = view.images.train * view.images.channel_std[0] + view.images.channel_mean[0]
    assert unscaled.amin(dim=(1, 2, 3)).abs().max() < 1e-5 and (unscaled.amax(dim=(1, 2, 3)) - 1).abs().max() < 1e-5


@pytest.mark.parametrize(
    "breakage, message",
    [
        ("missing", r"train.csv line 3 \(id 'p01'\), column 'path': image file not found: .*p01.png"),
        ("unreadable", r"train.csv line 2 \(id 'p00'\), column 'path': cannot read image .*p00.png"),
        ("empty", r"train.csv line 4 \(id 'p02'\), column 'path': empty image path"),
        (
            "mixed",
            r"test.csv line 2 \(id 'p04'\), column 'path': image .*p04.png is 5x8 with 3 channel\(s\), but .*p00.png "
            r"is 10x8 with 3 channel\(s\); set \"image_size\"",
        ),
        ("grey", r"train.csv line 4 \(id 'p02'\), column 'path': image .*p02.png is 10x8 with 1 channel\(s\)"),
        ("no_path_column", r"train.csv: missing column 'path'"),
    ],
)
def test_bad_image_files_name_the_site_file_row_and_image(tmp_path, breakage, message):
    images = _pixels(6)
    if breakage == "mixed":
        images["p04"] = images["p04"][:5]
    if breakage == "grey":
        images["p02"] = images["p02"][..., 0]
    folder = _byo_site(tmp_path, images)
    if breakage == "missing":
        (folder / "img" / "p01.png").unlink()
    if breakage == "unreadable":
        (folder / "img" / "p00.png").write_bytes(b"not a png at all")
    if breakage == "empty":
        index = pd.read_csv(folder / "train.csv")
        index.loc[2, "path"] = ""
        index.to_csv(folder / "train.csv", index=False)
    if breakage == "no_path_column":
        pd.read_csv(folder / "train.csv").rename(columns={"path": "file"}).to_csv(folder / "train.csv", index=False)
    with pytest.raises(DataError, match=r"^site 'site-1': .*" + message):
        _load(tmp_path)


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"modality": "video"}, r"'modality' must be one of \['table', 'image'\], got 'video'"),
        (
            {"modality": "image", "categorical_columns": ["a"]},
            r"\['categorical_columns'\] do not apply to modality 'image'",
        ),
        ({"image_size": [28, 28]}, r"\['image_size'\] do not apply to modality 'table'"),
        ({"modality": "image", "image_size": [28]}, r"'image_size' must be \[height, width\] in pixels, got \[28\]"),
    ],
)
def test_bad_image_schemas_are_named(tmp_path, schema, message):
    _byo_site(tmp_path, _pixels(4), schema)
    with pytest.raises(DataError, match=r"^site 'site-1': .*schema.json: " + message):
        _load(tmp_path)
