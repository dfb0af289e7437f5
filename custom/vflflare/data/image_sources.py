"""Whole image datasets that `vflflare split` cuts into strips: MNIST (IDX gzip) and CIFAR-10 (a JPEG
tar), read from the shared data folder.

Decoding happens once per source file: the arrays are cached as .npz under VFLFLARE_CACHE (default
~/.cache/vflflare), keyed by the file's name, size and modification time, never in the repository.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import struct
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vflflare.data.errors import DataError, dataset_owner

CACHE_ENV = "VFLFLARE_CACHE"
MNIST_FILES = {
    "train_images": Path("mnist") / "train-images-idx3-ubyte.gz",
    "train_labels": Path("mnist") / "train-labels-idx1-ubyte.gz",
    "test_images": Path("mnist") / "t10k-images-idx3-ubyte.gz",
    "test_labels": Path("mnist") / "t10k-labels-idx1-ubyte.gz",
}
CIFAR10_FILE = Path("cifar10") / "CIFAR-10-images_YoongiKim_d7d0561.tar.gz"
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


@dataclass
class ImageSource:
    """A dataset's official train and test sets: uint8 images [n, height, width, channels], int64 labels."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    num_classes: int


def image_source_files(name: str, data_dir: str | os.PathLike[str]) -> list[Path]:
    relative = list(MNIST_FILES.values()) if name == "mnist" else [CIFAR10_FILE]
    return [Path(data_dir) / path for path in relative]


def load_image_source(name: str, data_dir: str | os.PathLike[str]) -> ImageSource:
    if name not in IMAGE_SOURCES:
        raise ValueError(f"unknown image dataset {name!r}; choose one of {sorted(IMAGE_SOURCES)}")
    files = image_source_files(name, data_dir)
    for path in files:
        if not path.is_file():
            raise DataError.at(
                dataset_owner(name),
                path,
                "file not found (--data-dir names the folder holding the dataset folders, e.g. ../shared/data)",
            )
    arrays = _cached(name, files, lambda: IMAGE_SOURCES[name](Path(data_dir)))
    return ImageSource(**arrays, num_classes=int(arrays["train_labels"].max()) + 1)


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "vflflare")


def _cached(name: str, files: list[Path], decode: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    stamp = "-".join(f"{p.stat().st_size}.{p.stat().st_mtime_ns}" for p in files)
    path = cache_dir() / f"{name}-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.npz"
    if path.is_file():
        with np.load(path) as stored:
            return {key: stored[key] for key in stored.files}
    arrays = decode()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.npz")
    np.savez(partial, **arrays)
    os.replace(partial, path)  # a run killed while writing leaves no half cache behind
    return arrays


def _mnist(data_dir: Path) -> dict[str, np.ndarray]:
    return {key: _read_idx(data_dir / path) for key, path in MNIST_FILES.items()}


def _read_idx(path: Path) -> np.ndarray:
    """An IDX file (LeCun's format): images as [n, 28, 28, 1] uint8, labels as int64 [n]."""
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    zero, dtype, dims = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise DataError.at(dataset_owner("mnist"), path, "not an unsigned-byte IDX file")
    shape = struct.unpack(f">{dims}I", data[4 : 4 + 4 * dims])
    values = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    return values.astype(np.int64) if dims == 1 else values[..., None].copy()


def _cifar10(data_dir: Path) -> dict[str, np.ndarray]:
    """The JPEG tar's train|test/<class>/NNNN.jpg, in class then file order."""
    from PIL import Image

    found: dict[str, list[tuple[int, str, np.ndarray]]] = {"train": [], "test": []}
    with tarfile.open(data_dir / CIFAR10_FILE) as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 3 or parts[0] not in found or parts[1] not in CIFAR10_CLASSES:
                continue
            with Image.open(io.BytesIO(tar.extractfile(member).read())) as image:
                pixels = np.asarray(image.convert("RGB"), dtype=np.uint8)
            found[parts[0]].append((CIFAR10_CLASSES.index(parts[1]), parts[2], pixels))
    arrays = {}
    for split, items in found.items():
        items.sort(key=lambda item: item[:2])
        arrays[f"{split}_images"] = np.stack([item[2] for item in items])
        arrays[f"{split}_labels"] = np.array([item[0] for item in items], dtype=np.int64)
    return arrays


IMAGE_SOURCES: dict[str, Callable[[Path], dict[str, np.ndarray]]] = {"mnist": _mnist, "cifar10": _cifar10}
