"""LEADERBOARD.md: the default grids (`vflflare bench`: every tabular method and baseline), each change to the
tabular recipe tried against them, and the fair comparison with tuned trees (issue 26). Each folder's tables
are `vflflare bench report` of it; "Changes tried" and the goal table summarise the changes against the
default grids (grid_DATASET), seed by seed on the same splits.

    vflflare bench run leaderboard                                   # the default grids, to a scratch folder
    vflflare bench run leaderboard --set folder='"ple"' --set job='{"numeric_transform": "ple"}'  # a change
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vflflare.bench.grid import LABEL_ALONE_TUNED, METHODS, TUNED, VFL_METHODS, BenchSpec, run_grid
from vflflare.bench.paths import COMMITTED
from vflflare.bench.records import read_jsonl
from vflflare.bench.report import RESULTS, cells
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import Builder, register, table

LEADERBOARD = "leaderboard"
FOLDERS = ("quantile", "mlp128x2", "ple", "ensemble3", "wd1e-4", "ple_ensemble3")  # the changes' folder stems
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
DEFAULTS = BenchSpec()


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """One `vflflare bench` folder per dataset, out/FOLDER_DATASET (FOLDER: grid for the default recipe)."""
    if out.resolve().is_relative_to(COMMITTED.resolve()):
        # a grid folder also holds its splits and work folders: only results.jsonl and bench.json are committed
        raise ValueError("run the leaderboard into a scratch folder, then copy results.jsonl and bench.json")
    settings = spec.settings
    folder = str(data_dir) if data_dir else None  # None: built-in datasets only
    for dataset in spec.datasets:
        bench = BenchSpec(
            [dataset], list(settings["overlaps"]), list(spec.seeds), list(spec.methods), settings["sites"],
            settings["sim"], folder, settings["workers"], dict(settings["job"]), settings["ensemble"],
        )  # fmt: skip
        run_grid(bench, out / f"{settings['folder']}_{dataset}")


suite(
    Suite(
        name=LEADERBOARD,
        about="every tabular method and baseline on one grid of splits, and each change to the recipe",
        runner=run,
        datasets=tuple(DATASETS),
        methods=METHODS,
        seeds=tuple(DEFAULTS.seeds),
        settings={
            "overlaps": tuple(DEFAULTS.overlaps),
            "sites": DEFAULTS.sites,
            "sim": DEFAULTS.sim,
            "workers": 2,
            "job": {},  # a job setting for every VFL method that has it (`vflflare bench --set`)
            "ensemble": DEFAULTS.ensemble,
            "folder": "grid",  # the change's name: its records go to FOLDER_DATASET
        },
        records=LEADERBOARD,
    )
)
FAIR_PAIRS = (("VFLHLP", TUNED), ("VFLHLP", LABEL_ALONE_TUNED), ("SS-VFL-I", TUNED), ("VFLHLP", "central XGBoost"))


def bench_report(folder: str, against: str | None = None, pairs: tuple[tuple[str, str], ...] = ()) -> Builder:
    """`vflflare bench report benchmarks/results/FOLDER [--against ...] [--paired ...]`."""

    def build() -> str:
        from vflflare.bench.report import report_text

        return report_text(COMMITTED / folder, COMMITTED / against if against else None, list(pairs))

    return build


for _name in ("grid_credit_default", "grid_adult", "default"):
    register(f"{LEADERBOARD}/{_name}", bench_report(f"{LEADERBOARD}/{_name}"))
register(f"{LEADERBOARD}/ple_ensemble3", bench_report(f"{LEADERBOARD}/ple_ensemble3", f"{LEADERBOARD}/default"))
for _change in FOLDERS:
    for _dataset in DATASETS:
        if (COMMITTED / LEADERBOARD / f"{_change}_{_dataset}").is_dir():
            register(
                f"{LEADERBOARD}/{_change}_{_dataset}",
                bench_report(f"{LEADERBOARD}/{_change}_{_dataset}", f"{LEADERBOARD}/grid_{_dataset}"),
            )
register(f"{LEADERBOARD}/fair_trees", bench_report(f"{LEADERBOARD}/fair_trees", pairs=FAIR_PAIRS))


def records(stem: str | None, dataset: str) -> list[dict]:
    """A change's records on `dataset` ([] if it did not run there); stem None: the default grid."""
    return read_jsonl(COMMITTED / LEADERBOARD / (f"{stem}_{dataset}" if stem else f"grid_{dataset}") / RESULTS)


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


@table(f"{LEADERBOARD}/changes")
def changes_and_goal() -> str:
    return changes_tried() + "\n" + goal()
