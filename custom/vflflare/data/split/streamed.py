"""`synthetic_linear`: a synthetic split too big to hold in memory, drawn chunk by chunk straight into
Parquet (issue 41: SecretFlow's 2 parties x 800k rows x 1500 features would be 9.6 GB of float32).

Every feature is N(0, 1), stored as float32. Each site holds INFORMATIVE informative columns at positions
drawn from the seed; the label is Bernoulli(sigmoid(logit)) with logit = SIGNAL * w . x over all of them
(|w| = 1), so no site predicts well alone, and the best possible test AUC, the logit's own, is written
to the manifest as `oracle_test_auc`. Rows are independent, so they are kept in order instead of shuffled:
the first n_train rows are training rows (the first `overlap` of them aligned and labeled, the rest in one
contiguous unaligned block per site) and the last n_test rows are aligned test rows. Chunk c of rows is
drawn from (seed, c) alone, so the same arguments give the same files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vflflare.data.schema import (
    DEFAULT_ID_COLUMN,
    DEFAULT_LABEL_COLUMN,
    LABELS_FILE,
    SCHEMA_FILE,
    LabelSpec,
    TableSchema,
)
from vflflare.data.split.tables import (
    MANIFEST_FILE,
    OVERLAP_IDS_FILE,
    SERVER,
    TEST_FILE,
    TEST_LABELS_FILE,
    TRAIN_FILE,
    TRAIN_LABELS_FILE,
    check_sites,
    write_json,
)

DATASET = "synthetic_linear"
CHUNK_ROWS = 16384
INFORMATIVE = 8  # per site
SIGNAL = 3.0  # the logit's standard deviation


def _roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores))


def signal_weights(features: int, n_sites: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The informative columns (global positions, INFORMATIVE per site) and their weights."""
    rng = np.random.default_rng([seed, 0])
    bounds = np.linspace(0, features, n_sites + 1).astype(int)
    columns = np.concatenate(
        [
            np.sort(rng.choice(np.arange(lo, hi), min(INFORMATIVE, hi - lo), replace=False))
            for lo, hi in zip(bounds, bounds[1:])
        ]
    )
    weights = rng.standard_normal(len(columns))
    return columns, weights / np.linalg.norm(weights)


def write_streamed_synthetic(
    out: str | Path,
    sites: list[str],
    rows: int,
    features: int,
    overlap: int,
    seed: int,
    test_fraction: float = 0.2,
    label_owner: str = SERVER,
) -> dict:
    """Write the split into `out` (a new or empty folder) as Parquet; returns the manifest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    check_sites(sites)
    if features < len(sites):
        raise ValueError(f"{features} columns cannot be split among {len(sites)} sites")
    if label_owner != SERVER and label_owner not in sites:
        raise ValueError(f"label owner must be {SERVER!r} or one of the sites {sites}, got {label_owner!r}")
    n_test = int(round(test_fraction * rows))
    n_train = rows - n_test
    if not 0 < test_fraction < 1 or n_test < 1:
        raise ValueError(f"test_fraction {test_fraction} of {rows} rows leaves no test row")
    if not 1 <= overlap <= n_train:
        raise ValueError(f"overlap must be in 1..{n_train} (rows left after {n_test} test rows), got {overlap}")
    root = Path(out)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(f"output folder {root} exists and is not empty; remove it or choose another --out")

    bounds = np.linspace(0, features, len(sites) + 1).astype(int)
    names = [f"x{i}" for i in range(features)]
    own = np.cumsum([0] + [len(block) for block in np.array_split(np.arange(n_train - overlap), len(sites))])
    own_rows = {site: (overlap + own[k], overlap + own[k + 1]) for k, site in enumerate(sites)}
    informative, weights = signal_weights(features, len(sites), seed)
    width = max(7, len(str(rows - 1)))
    id_type = pa.field(DEFAULT_ID_COLUMN, pa.string())

    def writer(path: Path, columns: list[str]) -> pq.ParquetWriter:
        path.parent.mkdir(parents=True, exist_ok=True)
        schema = pa.schema([id_type, *(pa.field(name, pa.float32()) for name in columns)])
        return pq.ParquetWriter(path.with_suffix(".parquet"), schema, compression="none")

    label_schema = pa.schema([id_type, pa.field(DEFAULT_LABEL_COLUMN, pa.int64())])
    label_root = root / label_owner
    label_root.mkdir(parents=True, exist_ok=True)
    writers = {
        (site, part): writer(root / site / file, names[bounds[k] : bounds[k + 1]])
        for k, site in enumerate(sites)
        for part, file in (("train", TRAIN_FILE), ("test", TEST_FILE))
    }
    label_writers = {
        part: pq.ParquetWriter((label_root / file).with_suffix(".parquet"), label_schema)
        for part, file in (("train", TRAIN_LABELS_FILE), ("test", TEST_LABELS_FILE))
    }
    test_logits, test_labels = [], []
    try:
        for chunk, start in enumerate(range(0, rows, CHUNK_ROWS)):
            stop = min(rows, start + CHUNK_ROWS)
            rng = np.random.default_rng([seed, 1, chunk])
            block = rng.standard_normal((stop - start, features), dtype=np.float32)
            logit = SIGNAL * (block[:, informative].astype(np.float64) @ weights)
            label = (rng.random(stop - start) < 1 / (1 + np.exp(-logit))).astype(np.int64)
            ids = np.array([f"syn-{i:0{width}d}" for i in range(start, stop)], dtype=object)
            row = np.arange(start, stop)
            test = row >= n_train
            aligned = row < overlap
            for k, site in enumerate(sites):
                lo, hi = own_rows[site]
                keep = aligned | ((row >= lo) & (row < hi))
                for part, rows_of in (("train", keep & ~test), ("test", test)):
                    if rows_of.any():
                        mine = np.asfortranarray(block[rows_of, bounds[k] : bounds[k + 1]])  # columns contiguous
                        columns = [pa.array(ids[rows_of], pa.string())]
                        columns += [pa.array(mine[:, j]) for j in range(mine.shape[1])]
                        writers[site, part].write_table(
                            pa.Table.from_arrays(columns, schema=writers[site, part].schema)
                        )
            for part, rows_of in (("train", aligned & ~test), ("test", test)):
                if rows_of.any():
                    label_writers[part].write_table(
                        pa.Table.from_arrays(
                            [pa.array(ids[rows_of], pa.string()), pa.array(label[rows_of])], schema=label_schema
                        )
                    )
            test_logits.append(logit[test])
            test_labels.append(label[test])
    finally:
        for handle in [*writers.values(), *label_writers.values()]:
            handle.close()

    for site in sites:
        write_json(root / site / SCHEMA_FILE, TableSchema(DEFAULT_ID_COLUMN, ()).to_dict())
    write_json(label_root / LABELS_FILE, LabelSpec(2, DEFAULT_ID_COLUMN, DEFAULT_LABEL_COLUMN).to_dict())
    overlap_ids = "\n".join([DEFAULT_ID_COLUMN, *(f"syn-{i:0{width}d}" for i in range(overlap))]) + "\n"
    (root / OVERLAP_IDS_FILE).write_text(overlap_ids, encoding="utf-8")
    manifest = {
        "dataset": DATASET,
        "seed": seed,
        "sites": list(sites),
        "label_owner": label_owner,
        "label_in_table": False,
        "num_classes": 2,
        "overlap": overlap,
        "n_test": n_test,
        "test_fraction": test_fraction,
        "active_site_labels": False,
        "per_site": {
            site: {
                "columns": names[bounds[k] : bounds[k + 1]],
                "categorical_columns": [],
                "n_train": int(overlap + own[k + 1] - own[k]),
                "n_aligned": overlap,
                "n_unaligned": int(own[k + 1] - own[k]),
                "n_test": n_test,
            }
            for k, site in enumerate(sites)
        },
        "signal": {
            "informative": [names[j] for j in informative],
            "weights": weights.round(6).tolist(),
            "logit_sd": SIGNAL,
            "oracle_test_auc": round(_roc_auc(np.concatenate(test_labels), np.concatenate(test_logits)), 6),
            "rows_per_chunk": CHUNK_ROWS,
        },
    }
    write_json(root / MANIFEST_FILE, manifest)
    return manifest
