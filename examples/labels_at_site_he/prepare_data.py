"""A clinic that holds the labels in its own table, and a registry with other columns about partly the same
patients: no coordinator-side labels at all (label_owner: the clinic).

    python prepare_data.py --out /tmp/vflflare_examples/labels_at_site

The clinic's schema.json names its label column: an empty cell in train.csv is a row without a label, every
test row has one. The label column never leaves the clinic as a feature.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.datasets import load_breast_cancer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/vflflare_examples/labels_at_site"))
    out = parser.parse_args().out
    data = load_breast_cancer(as_frame=True)
    rng = np.random.default_rng(1)
    ids = pd.Series([f"C-{i:05d}" for i in rng.permutation(len(data.frame))], name="id")
    columns = list(data.feature_names)
    clinic = pd.concat([ids, data.frame[columns[::2]], data.target.rename("diagnosis")], axis=1)
    registry = pd.concat([ids, data.frame[columns[1::2]]], axis=1)
    order = rng.permutation(len(ids))
    test, shared, clinic_only, registry_only = order[:110], order[110:360], order[360:470], order[470:]
    clinic["diagnosis"] = clinic["diagnosis"].astype("Int64")  # integer labels, empty where unknown
    clinic.loc[clinic.index[clinic_only], "diagnosis"] = pd.NA  # rows the clinic has not labelled yet
    tables = {
        "clinic": (clinic, np.concatenate([shared, clinic_only])),
        "registry": (registry, np.concatenate([shared, registry_only])),
    }
    for site, (table, train) in tables.items():
        folder = out / site
        folder.mkdir(parents=True, exist_ok=True)
        table.iloc[train].to_csv(folder / "train.csv", index=False)
        table.iloc[test].to_csv(folder / "test.csv", index=False)
    (out / "clinic" / "schema.json").write_text(json.dumps({"label_column": "diagnosis", "num_classes": 2}, indent=2))
    print(f"wrote {out}: clinic/ (features and labels), registry/ (features)")


if __name__ == "__main__":
    main()
