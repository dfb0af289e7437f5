"""A site's own images: train.csv / test.csv index image files (PNG, JPEG, NIfTI, ...), read with MONAI.

Each image is loaded channel-first (`LoadImage`), resized to the schema's `image_size` when one is
given (`Resize`), and scaled to [0, 1]: integer pixels by their type's range (`ScaleIntensityRange`),
float images (NIfTI) per image from their minimum to maximum (`ScaleIntensity`). The site then
standardises each channel with the mean and standard deviation of its own training images, as it
standardises table columns. Without `image_size`, every image must have the first one's size.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from vflflare.data.errors import VALUE
from vflflare.data.ids import normalize_table_ids
from vflflare.data.schema import TEST_FILE, TRAIN_FILE, TableSchema
from vflflare.data.table import ColumnPlan, CsvTable, check_disjoint, read_csv

PIL_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


@dataclass
class SiteImages:
    """What an image site holds after loading: standardised float32 [n, channels, height, width]."""

    site: str
    train_ids: list[str]
    train: torch.Tensor
    test_ids: list[str]
    test: torch.Tensor
    channel_mean: list[float]
    channel_std: list[float]


def load_site_images(
    owner: str, site: str, folder: Path, schema: TableSchema, id_normalize: Sequence[str] = ()
) -> SiteImages:
    indexes = {}
    for name in (TRAIN_FILE, TEST_FILE):
        index = read_csv(owner, folder / name, schema.id_column, plan=ColumnPlan.only([schema.path_column]))
        index.column(schema.path_column)  # a missing path column is named here, before any image is read
        normalize_table_ids(index, schema.id_column, id_normalize)
        indexes[name] = index
    check_disjoint(indexes[TRAIN_FILE], indexes[TEST_FILE])
    loader = _ImageLoader(schema)
    train = loader.load(indexes[TRAIN_FILE])
    test = loader.load(indexes[TEST_FILE])
    mean = train.mean(dim=(0, 2, 3))
    std = train.std(dim=(0, 2, 3)).clamp_min(1e-6)  # a constant channel stays finite (it becomes all zeros)

    def scale(x: torch.Tensor) -> torch.Tensor:
        return (x - mean[None, :, None, None]) / std[None, :, None, None]

    return SiteImages(
        site,
        list(indexes[TRAIN_FILE].ids),
        scale(train),
        list(indexes[TEST_FILE].ids),
        scale(test),
        mean.tolist(),
        std.tolist(),
    )


class _ImageLoader:
    """Reads the files an index names into one tensor; every image must come out with one shape."""

    def __init__(self, schema: TableSchema) -> None:
        from monai.data import PILReader
        from monai.transforms import LoadImage, Resize

        self.schema = schema
        # PIL's reader would otherwise return (width, height): keep rows as rows
        self.load_2d = LoadImage(
            reader=PILReader(reverse_indexing=False), image_only=True, ensure_channel_first=True, dtype=None
        )
        self.load_any = LoadImage(image_only=True, ensure_channel_first=True, dtype=None)
        self.resize = Resize(schema.image_size, mode="area") if schema.image_size else None
        self.shape: tuple[int, ...] | None = None
        self.first = ""

    def load(self, index: CsvTable) -> torch.Tensor:
        from monai.data import set_track_meta
        from monai.transforms import ScaleIntensityRange

        paths = index.column(self.schema.path_column)
        base = Path(index.source).parent
        images = None
        integer_top = torch.zeros(len(paths))  # the pixel type's maximum; 0: a float image, scaled already
        set_track_meta(False)  # plain tensors: MONAI's metadata would double the time per image
        try:
            with warnings.catch_warnings():
                # PIL hands MONAI read-only arrays; each image is copied into `images` at once
                warnings.filterwarnings("ignore", "The given NumPy array is not writable")
                for row, relative in enumerate(paths):
                    image, integer_top[row] = self._read(index, row, relative, base)
                    if images is None:
                        images = torch.empty((len(paths), *image.shape), dtype=torch.float32)
                    images[row] = image
        finally:
            set_track_meta(True)
        if images is None:
            raise index.error("no rows: the index lists no image")
        for top in integer_top.unique().tolist():  # one pass per pixel type, usually one
            if top:
                rows = integer_top == top
                images[rows] = torch.as_tensor(ScaleIntensityRange(0.0, top, 0.0, 1.0, clip=True)(images[rows]))
        return images

    def _read(self, index: CsvTable, row: int, relative: str, base: Path) -> tuple[torch.Tensor, float]:
        """The image at `relative` as float32 channels-first, and its integer pixel type's maximum (0 for
        a float image, which is scaled to [0, 1] by its own range here)."""
        from monai.transforms import ScaleIntensity

        column = self.schema.path_column
        if not relative:
            raise index.error("empty image path", row=row, column=column)
        path = base / relative
        if not path.is_file():
            raise index.error(f"image file not found: {VALUE}", row=row, column=column, value=path)
        try:
            loader = self.load_2d if path.suffix.lower() in PIL_SUFFIXES else self.load_any
            image = torch.as_tensor(loader(str(path)))
        except Exception as exc:  # the readers raise many types; the file is what the user must fix
            raise index.error(
                f"cannot read image {VALUE}", row=row, column=column, value=f"{path}: {type(exc).__name__}: {exc}"
            ) from exc
        if image.ndim != 3:
            raise index.error(
                f"image {VALUE} has shape {tuple(image.shape)} (channels first); expected a 2D image with channels",
                row=row,
                column=column,
                value=path,
            )
        top = 0.0
        if image.dtype.is_floating_point:
            image = torch.as_tensor(ScaleIntensity(minv=0.0, maxv=1.0)(image))
        else:
            top = 1.0 if image.dtype == torch.bool else float(torch.iinfo(image.dtype).max)
        image = image.float()
        if self.resize is not None and tuple(image.shape[1:]) != tuple(self.schema.image_size):
            image = torch.as_tensor(self.resize(image))
        if self.shape is None:
            self.shape, self.first = tuple(image.shape), str(path)
        elif tuple(image.shape) != self.shape:
            hint = "" if self.resize is not None else '; set "image_size": [height, width] in schema.json to resize'
            raise index.error(
                f"image {VALUE} is {_describe(self.shape)}{hint}",
                row=row,
                column=column,
                value=f"{path} is {_describe(image.shape)}, but {self.first}",
            )
        return image, top


def _describe(shape: Sequence[int]) -> str:
    channels, *size = shape
    return f"{'x'.join(map(str, size))} with {channels} channel(s)"
