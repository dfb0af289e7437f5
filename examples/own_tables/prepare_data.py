"""Two institutions' own tables, written the way vflflare reads them (README "Running on your own tables"):
a hospital and a lab hold different columns about partly the same patients, the coordinator holds the
labels of the patients both have, and each site has new rows to score later.

    python prepare_data.py --out /tmp/vflflare_examples/own_tables

The data is scikit-learn's breast-cancer table (no download). A few lab values are left empty, as real
tables have them: the lab's schema.json says how to fill them.
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
    parser.add_argument("--out", type=Path, default=Path("/tmp/vflflare_examples/own_tables"))
    out = parser.parse_args().out
    data = load_breast_cancer(as_frame=True)
    rng = np.random.default_rng(0)
    people = pd.Series([f"P{i:04d}" for i in rng.permutation(len(data.frame))], name="patient_id")
    columns = list(data.feature_names)
    hospital = pd.concat([people, data.frame[columns[:15]]], axis=1)
    lab = pd.concat([people, data.frame[columns[15:]]], axis=1)
    lab.loc[rng.random(len(lab)) < 0.05, columns[20]] = np.nan  # gaps, as in any lab export
    labels = pd.DataFrame({"patient_id": people, "label": data.target})

    order = rng.permutation(len(people))
    test, score, train = order[:100], order[100:150], order[150:]
    shared = train[:250]  # patients both sites have; the rest of each site's rows are its own
    hospital_only, lab_only = train[250:335], train[335:]
    for site, table, own in (("hospital", hospital, hospital_only), ("lab", lab, lab_only)):
        folder = out / site
        folder.mkdir(parents=True, exist_ok=True)
        table.iloc[np.concatenate([shared, own])].to_csv(folder / "train.csv", index=False)
        table.iloc[test].to_csv(folder / "test.csv", index=False)
        table.iloc[score].to_csv(folder / "score.csv", index=False)  # new rows, no labels
        schema = {"id_column": "patient_id", "missing": {"numeric": "median", "indicator": True}}
        (folder / "schema.json").write_text(json.dumps(schema, indent=2))
    server = out / "server"
    server.mkdir(parents=True, exist_ok=True)
    labels.iloc[shared].to_csv(server / "train_labels.csv", index=False)
    labels.iloc[test].to_csv(server / "test_labels.csv", index=False)
    people.iloc[score].to_csv(server / "score.csv", index=False)  # the patients whose scores it asks for
    (server / "labels.json").write_text(json.dumps({"num_classes": 2, "id_column": "patient_id"}, indent=2))
    print(f"wrote {out}: hospital/, lab/ (train.csv, test.csv, score.csv, schema.json), server/ (labels, IDs to score)")


if __name__ == "__main__":
    main()
