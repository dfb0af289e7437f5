"""LEADERBOARD's "Changes tried" (issue 14): each change to the tabular recipe is one `vflflare bench` folder
per dataset under benchmarks/results/leaderboard/CHANGE_DATASET, run on the default grid's splits and seeds;
these two tables summarise them against the default grids (grid_DATASET). Each folder's own tables come
from `vflflare bench report FOLDER --against grid_DATASET`.

    .venv/bin/python benchmarks/leaderboard_changes.py    # print both tables
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vflflare.bench.grid import VFL_METHODS
from vflflare.bench.records import read_jsonl
from vflflare.bench.report import RESULTS, cells

LEADERBOARD = Path(__file__).resolve().parent / "results" / "leaderboard"
DATASETS = {"credit_default": "credit default", "adult": "Adult"}
CHANGES = {  # folder stem -> the change as the table names it
    "quantile": "1. quantile encoding (`numeric_transform: quantile`)",
    "mlp128x2": "2. wider bottoms (2 x 128 hidden)",
    "ple": "3. piecewise-linear encoding (`numeric_transform: ple`)",
    "ensemble3": "4. ensemble of 3 job seeds (`vflflare bench --ensemble 3`)",
    "wd1e-4": "5. weight decay 1e-4 (`weight_decay: 0.0001`)",
}
RECIPES = {  # folder stem (None: the default grid) -> the row of the goal table
    None: "best neural method, default recipe",
    "ple": "best neural method, `ple`",
    "ensemble3": "best neural method, ensemble of 3 (no FedHSSL)",
    "ple_ensemble3": "best neural method, `ple` + ensemble of 3 (no FedHSSL)",
}
TREES = "central XGBoost"


def records(stem: str | None, dataset: str) -> list[dict]:
    """A change's records on `dataset` ([] if it did not run there); stem None: the default grid."""
    path = LEADERBOARD / (f"{stem}_{dataset}" if stem else f"grid_{dataset}") / RESULTS
    return read_jsonl(path) if path.exists() else []


def seed_deltas(changed: list[dict], default: list[dict]) -> dict[tuple[str, int], list[float]]:
    """(method, N_o) -> test AUC with the change - without it, seed by seed, for the VFL methods."""
    here, there = cells(changed), cells(default)
    out = {}
    for (_, method, n), rs in here.items():
        old = {r["seed"]: r["metrics"]["test_auc"] for r in there.get((rs[0]["dataset"], method, n), [])}
        if method in VFL_METHODS:
            out[(method, n)] = [r["metrics"]["test_auc"] - old[r["seed"]] for r in rs if r["seed"] in old]
    return out


def changes_tried() -> str:
    """Per change and dataset: the median change over every VFL run, and in how many (method, N_o) cells
    the median over seeds went up."""
    lines = ["| change | " + " | ".join(DATASETS.values()) + " |", "|---|" + "---|" * len(DATASETS)]
    for stem, name in CHANGES.items():
        row = []
        for dataset in DATASETS:
            deltas = seed_deltas(records(stem, dataset), records(None, dataset))
            runs = [d for ds in deltas.values() for d in ds]
            up = sum(np.median(ds) > 0 for ds in deltas.values() if ds)
            row.append(f"{np.median(runs):+.3f}, {up}/{len(deltas)}" if runs else "-")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def best_neural(rs: list[dict], n: int) -> tuple[float, str] | None:
    """The VFL method with the highest median test AUC over seeds at N_o = n, and that median."""
    medians = [
        (float(np.median([r["metrics"]["test_auc"] for r in group])), method)
        for (_, method, overlap), group in cells(rs).items()
        if overlap == n and method in VFL_METHODS
    ]
    return max(medians) if medians else None


def goal() -> str:
    """Central XGBoost against the best neural method of each recipe, per dataset and N_o; bold where the
    neural method is at or above the trees."""
    columns = [(d, n) for d in DATASETS for n in sorted({r["overlap"] for r in records(None, d)})]
    trees = {
        (d, n): float(np.median([r["metrics"]["test_auc"] for r in cells(records(None, d))[(d, TREES, n)]]))
        for d, n in columns
    }
    lines = [
        "| | " + " | ".join(f"{DATASETS[d]} N_o = {n}" for d, n in columns) + " |",
        "|---|" + "---|" * len(columns),
        "| central XGBoost (= vertical XGBoost) | " + " | ".join(f"{trees[c]:.3f}" for c in columns) + " |",
    ]
    for stem, name in RECIPES.items():
        row = []
        for d, n in columns:
            best = best_neural(records(stem, d), n)
            if best is None:
                row.append("-")
                continue
            auc, method = best
            text = f"{auc:.3f}"
            row.append(f"{f'**{text}**' if auc >= trees[(d, n)] else text} ({method})")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def tables(_: object = None) -> str:
    return changes_tried() + "\n" + goal()


if __name__ == "__main__":
    print(tables())
