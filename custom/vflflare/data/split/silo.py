"""CFL's silo space (Ginanjar, Li, Hua, "Contrastive Federated Learning with Tabular Data Silos",
paper 003, Definitions 2-4 and Sec. 5.1): every silo holds an equal-width vertical slice of the
(encoded) columns and its own labels for its own rows (Y^n = Y^G); rows are matched by ID.

The paper's preprocessing, reproduced: categorical columns one-hot encoded, rows with a missing value
('?') left out (and counted), columns shuffled with the split's seed (Sec. 5: "to remove any semantic
relation"), then cut into equal slices in that order. When the column count does not divide by the
number of silos the last slices get constant-zero `pad_*` columns, so that FedAvg over the silos'
encoders sees one shape: Adult's 104 encoded columns become 5 silos x 21 (one pad column), MNIST's
784 pixels 4 x 196 or 16 x 49.

Settings (Sec. 5.1), over the training rows; test rows stay with every silo:
- standard: every silo has every row;
- data_imbalance: the first 25 % of the silos keep 50 % of their rows;
- class_imbalance: the first 25 % keep 50 % of the rows of half of the classes (drawn by seed);
- mixed: data_imbalance on the first 25 % of the silos, class_imbalance on the next 25 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from vflflare.data.schema import DEFAULT_ID_COLUMN, DEFAULT_LABEL_COLUMN

SETTINGS = ("standard", "data_imbalance", "class_imbalance", "mixed")
AFFECTED_SHARE, KEPT_SHARE = 0.25, 0.5  # the paper's client share and data / class drop


@dataclass
class SiloSpace:
    silos: list[str]
    columns: dict[str, list[str]]  # each silo's slice, equal widths (pad columns included)
    train: dict[str, pd.DataFrame]  # id, slice, label: the silo's own training rows
    test: dict[str, pd.DataFrame]
    num_classes: int
    left_out: dict[str, int]  # why -> rows, for the split's report
    setting: str


def encode_table(frame: pd.DataFrame, categorical: list[str]) -> tuple[pd.DataFrame, np.ndarray]:
    """One-hot categorical columns (0/1 floats); rows with a '?' or empty categorical value are left out.
    Returns the encoded frame and the kept row positions."""
    missing = np.zeros(len(frame), dtype=bool)
    for name in categorical:
        values = frame[name].astype(str).str.strip()
        missing |= values.isin(["?", "", "nan"]).to_numpy()
    missing |= frame.drop(columns=categorical).isna().any(axis=1).to_numpy()
    kept = np.flatnonzero(~missing)
    encoded = pd.get_dummies(frame.iloc[kept], columns=categorical, dtype=np.float64)
    return encoded.reset_index(drop=True), kept


def equal_slices(columns: list[str], n_silos: int) -> list[list[str]]:
    """Columns cut into n_silos consecutive slices of ceil(d / n) columns, the last ones padded with
    `pad_<k>` names (constant zero columns)."""
    width = math.ceil(len(columns) / n_silos)
    padded = columns + [f"pad_{k}" for k in range(width * n_silos - len(columns))]
    return [padded[i * width : (i + 1) * width] for i in range(n_silos)]


def silo_rows(labels: np.ndarray, n_silos: int, setting: str, rng: np.random.Generator) -> list[np.ndarray]:
    """Training-row positions each silo keeps under `setting` (sorted)."""
    if setting not in SETTINGS:
        raise ValueError(f"silo setting must be one of {SETTINGS}, got {setting!r}")
    n = len(labels)
    affected = max(1, int(round(AFFECTED_SHARE * n_silos)))
    drop_data = range(affected) if setting in ("data_imbalance", "mixed") else range(0)
    first_class = affected if setting == "mixed" else 0
    drop_class = range(first_class, first_class + affected) if setting in ("class_imbalance", "mixed") else range(0)
    classes = np.unique(labels)
    rows = []
    for silo in range(n_silos):
        keep = np.ones(n, dtype=bool)
        if silo in drop_data:
            keep[rng.permutation(n)[: n - int(round(KEPT_SHARE * n))]] = False
        if silo in drop_class:
            for c in rng.choice(classes, size=len(classes) // 2, replace=False):
                members = np.flatnonzero(labels == c)
                keep[rng.permutation(members)[: len(members) - int(round(KEPT_SHARE * len(members)))]] = False
        rows.append(np.flatnonzero(keep))
    return rows


def split_silo_space(
    frame: pd.DataFrame,
    labels: np.ndarray,
    ids: list[str],
    silos: list[str],
    seed: int,
    setting: str = "standard",
    test_fraction: float = 0.2,
    categorical: list[str] | None = None,
) -> SiloSpace:
    """Pure: the same inputs and seed give the same silo space."""
    if len(silos) < 2:
        raise ValueError(f"a silo space needs at least 2 silos, got {silos}")
    encoded, kept = encode_table(frame, list(categorical or []))
    labels, ids = np.asarray(labels)[kept], np.asarray(ids, dtype=object)[kept]
    rng = np.random.default_rng(seed)
    columns = [str(c) for c in rng.permutation(np.asarray(encoded.columns, dtype=object))]
    slices = equal_slices(columns, len(silos))
    order = rng.permutation(len(encoded))
    n_test = int(round(test_fraction * len(encoded)))
    test_rows, train_rows = np.sort(order[:n_test]), np.sort(order[n_test:])
    own = silo_rows(labels[train_rows], len(silos), setting, rng)
    table = encoded.assign(**{c: 0.0 for s in slices for c in s if c.startswith("pad_")})

    def part(names: list[str], rows: np.ndarray) -> pd.DataFrame:
        out = table.iloc[rows][names].reset_index(drop=True)
        out.insert(0, DEFAULT_ID_COLUMN, ids[rows].astype(str))
        out[DEFAULT_LABEL_COLUMN] = labels[rows].astype(np.int64)
        return out

    return SiloSpace(
        silos=list(silos),
        columns=dict(zip(silos, slices)),
        train={s: part(names, train_rows[rows]) for s, names, rows in zip(silos, slices, own)},
        test={s: part(names, test_rows) for s, names in zip(silos, slices)},
        num_classes=int(labels.max()) + 1,
        left_out={"missing values ('?')": len(frame) - len(kept)},
        setting=setting,
    )


def image_table(pixels: np.ndarray) -> pd.DataFrame:
    """Images [n, H, W(, C)] as a table of pixel columns px_0..: the paper's "shuffled tabular" images."""
    flat = pixels.reshape(len(pixels), -1).astype(np.float64)
    return pd.DataFrame(flat, columns=[f"px_{k}" for k in range(flat.shape[1])])


def write_silo_space(space: SiloSpace, out_dir: str, manifest_extra: dict) -> Path:
    """Each silo's folder (train.csv and test.csv with its label column, schema.json declaring it) and a
    manifest; a non-empty folder is refused. Returns the manifest's path."""
    from vflflare.data.schema import TableSchema
    from vflflare.data.split.tables import (
        MANIFEST_FILE,
        SCHEMA_FILE,
        TEST_FILE,
        TRAIN_FILE,
        frame_to_csv,
        write_json,
        write_text,
    )

    root = Path(out_dir)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(f"output folder {root} exists and is not empty; remove it or choose another --out")
    for silo in space.silos:
        folder = root / silo
        folder.mkdir(parents=True, exist_ok=True)
        write_text(folder / TRAIN_FILE, frame_to_csv(space.train[silo]))
        write_text(folder / TEST_FILE, frame_to_csv(space.test[silo]))
        schema = TableSchema(DEFAULT_ID_COLUMN, (), DEFAULT_LABEL_COLUMN, space.num_classes)
        write_json(folder / SCHEMA_FILE, schema.to_dict())
    manifest = {
        "silo_space": True,
        "setting": space.setting,
        "sites": space.silos,
        "num_classes": space.num_classes,
        "left_out": space.left_out,
        "per_site": {
            s: {"columns": space.columns[s], "n_train": len(space.train[s]), "n_test": len(space.test[s])}
            for s in space.silos
        },
        **manifest_extra,
    }
    write_json(root / MANIFEST_FILE, manifest)
    return root / MANIFEST_FILE
