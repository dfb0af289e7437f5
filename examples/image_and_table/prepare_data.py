"""A site with images beside a site with a table, about the same people: a scanner holds the left half of
each handwritten digit as a PNG file, a registry holds a table of what the right half shows (one column
per pixel), the coordinator holds the labels (ten classes).

    python prepare_data.py --out /tmp/vflflare_examples/image_and_table

The digits are scikit-learn's 8x8 handwritten digits (no download). The scanner's schema.json says
`"modality": "image"`; its train.csv / test.csv index the image files (id, path).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from sklearn.datasets import load_digits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/vflflare_examples/image_and_table"))
    out = parser.parse_args().out
    digits = load_digits()
    images = (digits.images * (255 / 16)).astype(np.uint8)  # 0..16 ink -> 8-bit grey
    rng = np.random.default_rng(2)
    ids = np.array([f"D{i:04d}" for i in range(len(images))])
    order = rng.permutation(len(images))
    test, shared = order[:300], order[300:900]
    scanner_only, registry_only = order[900:1350], order[1350:]
    parts = {"scanner": np.concatenate([shared, scanner_only]), "registry": np.concatenate([shared, registry_only])}

    scanner = out / "scanner"
    (scanner / "images").mkdir(parents=True, exist_ok=True)
    for table, rows in (("train", parts["scanner"]), ("test", test)):
        for row in rows:
            Image.fromarray(images[row, :, :4]).save(scanner / "images" / f"{ids[row]}.png")
        pd.DataFrame({"id": ids[rows], "path": [f"images/{i}.png" for i in ids[rows]]}).to_csv(
            scanner / f"{table}.csv", index=False
        )
    (scanner / "schema.json").write_text(json.dumps({"modality": "image"}, indent=2))

    registry = out / "registry"
    registry.mkdir(parents=True, exist_ok=True)
    right = images[:, :, 4:].reshape(len(images), -1) / 255
    columns = [f"px_{r}_{c}" for r in range(8) for c in range(4, 8)]
    for table, rows in (("train", parts["registry"]), ("test", test)):
        pd.DataFrame(right[rows], columns=columns).assign(id=ids[rows])[["id", *columns]].to_csv(
            registry / f"{table}.csv", index=False
        )

    server = out / "server"
    server.mkdir(parents=True, exist_ok=True)
    for table, rows in (("train", shared), ("test", test)):
        pd.DataFrame({"id": ids[rows], "label": digits.target[rows]}).to_csv(
            server / f"{table}_labels.csv", index=False
        )
    (server / "labels.json").write_text(json.dumps({"num_classes": 10}, indent=2))
    print(f"wrote {out}: scanner/ (images), registry/ (a table), server/ (labels)")


if __name__ == "__main__":
    main()
