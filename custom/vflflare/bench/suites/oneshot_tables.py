"""ONESHOT_TABLES.md (issue 40, item 3): one-shot's `tabular_ssl = "scarf"` against the paper's FixMatch-tab,
vanilla split NN and SS-VFL-I, as pre-registered there.

Setting, as the leaderboard's: `vflflare split --dataset D --overlap N_o --seed S` at its defaults (2 parties,
labels at the server), N_o = 500, 1000, 2000, split seeds 10-12 (used by no earlier choice). Every method at
the package defaults otherwise, through the in-process driver (the simulator's numbers exactly).

    vflflare bench run oneshot_tables --committed   # the 72 runs, resumed where records exist
    vflflare bench tables                           # ONESHOT_TABLES.md's tables from results/oneshot_tables.jsonl
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.bench.inprocess import limit_threads, run_vfl
from vflflare.bench.paths import COMMITTED
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.splits import prepare_split
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import table
from vflflare.registry import make_config

NAME = "oneshot_tables"
RECORDS = f"{NAME}.jsonl"
SPLITS = Path("/tmp/vflflare-bench/oneshot-tables-splits")
DATASETS = ("credit_default", "adult")
OVERLAPS = (500, 1000, 2000)
SEEDS = (10, 11, 12)
METHODS: dict[str, dict[str, Any]] = {
    "one-shot paper": {"algorithm": "oneshot"},
    "one-shot scarf": {"algorithm": "oneshot", "tabular_ssl": "scarf"},
    "vanilla": {"algorithm": "vanilla"},
    "SS-VFL-I": {"algorithm": "ssvfl_i"},
}
PAPER, SCARF = "one-shot paper", "one-shot scarf"
BASELINES = ("vanilla", "SS-VFL-I")  # the claim: scarf >= each of them in every cell
FLIP_AT = 5  # the decision rule: scarf becomes the default on tables if it beats paper in >= 5 of 6 cells


def run_one(method: str, dataset: str, overlap: int, seed: int, data_dir: Path) -> dict[str, Any]:
    """One run on the leaderboard's split of (dataset, overlap, seed); the job seed is the split seed."""
    root = prepare_split(data_dir, overlap, seed, SPLITS, dataset)
    start = time.perf_counter()
    result, _ = run_vfl(make_config({**METHODS[method], "seed": seed}), root)
    if "error" in result:
        raise RuntimeError(f"{method} {dataset} {overlap} seed {seed}: {result['error']}")
    per_site = result["communication"]["per_site"]
    return {
        "dataset": dataset,
        "overlap": overlap,
        "seed": seed,
        "method": method,
        "config": METHODS[method],
        "metrics": result["metrics"],
        "rows": result["rows"],
        "comms_per_site": {s: [c["uploads"], c["downloads"]] for s, c in per_site.items()},
        "expected_per_site": {s: [c["uploads"], c["downloads"]] for s, c in result["expected_communication"].items()},
        "pretrain_steps": result["training"].get("pretrain_steps", {}),
        "wall_s": round(time.perf_counter() - start, 1),
        "env": environment_record(),
    }


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (dataset, N_o, seed, method) not yet in `out`, appended as each ends; a cell's methods run
    together, so a stopped run leaves whole cells."""
    limit_threads()
    done = {(r["dataset"], r["overlap"], r["seed"], r["method"]) for r in read_jsonl(out)}
    for dataset in spec.datasets:
        for overlap in spec.settings["overlaps"]:
            for seed in spec.seeds:
                for method in spec.methods:
                    if (dataset, overlap, seed, method) in done:
                        continue
                    record = run_one(method, dataset, overlap, seed, data_dir)
                    append_jsonl(out, record)
                    print(
                        f"{dataset} {overlap} seed {seed} {method}: test AUC {record['metrics']['test_auc']:.4f}, "
                        f"{record['wall_s']} s",
                        flush=True,
                    )


def _cells(records: list[dict]) -> dict[tuple[str, int], dict[str, list[dict]]]:
    """(dataset, N_o) -> method -> its records by seed."""
    cells: dict[tuple[str, int], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in sorted(records, key=lambda r: r["seed"]):
        cells[(r["dataset"], r["overlap"])][r["method"]].append(r)
    return dict(sorted(cells.items(), key=lambda kv: (DATASETS.index(kv[0][0]), kv[0][1])))


def medians(records: list[dict]) -> dict[tuple[str, int], dict[str, float]]:
    """Median test AUC over the seeds, per cell and method."""
    return {
        cell: {m: float(np.median([r["metrics"]["test_auc"] for r in rs])) for m, rs in by_method.items()}
        for cell, by_method in _cells(records).items()
    }


def auc_table(records: list[dict]) -> str:
    """Test AUC: median over the split seeds (each seed in brackets, in seed order), then the pre-registered
    counts in the scarf column: cells where its median beats paper's, and where the claim holds."""
    columns = [m for m in METHODS if any(m in by for by in _cells(records).values())]
    out = ["| data set | N_o | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for (dataset, overlap), by_method in _cells(records).items():
        cells = []
        for m in columns:
            values = [r["metrics"]["test_auc"] for r in by_method.get(m, [])]
            cells.append(f"{np.median(values):.4f} ({', '.join(f'{v:.4f}' for v in values)})" if values else "")
        out.append(f"| {dataset} | {overlap} | " + " | ".join(cells) + " |")
    med = medians(records)
    full = [c for c in med.values() if all(m in c for m in METHODS)]
    beats = sum(c[SCARF] > c[PAPER] for c in full)
    claim = sum(all(c[SCARF] >= c[b] for b in BASELINES) for c in full)
    for label, count in (("scarf's median > paper's", beats), ("scarf >= vanilla and >= SS-VFL-I", claim)):
        cells = [f"**{count} of {len(full)} cells**" if m == SCARF else "" for m in columns]
        out.append(f"| **{label}** | | " + " | ".join(cells) + " |")
    return "\n".join(out)


def cost_table(records: list[dict]) -> str:
    """Messages per site (uploads + downloads, every site; split NN's vary with early stopping: their range),
    whether they match expected_communications in every run, and wall time per run (median and range)."""
    out = [
        "| method | messages per site (uploads/downloads) | as expected | runs | wall s, median | wall s, range |",
        "|---|---|---|---|---|---|",
    ]
    by_method: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_method[r["method"]].append(r)
    for m in (m for m in METHODS if by_method.get(m)):
        rs = by_method[m]
        counts = {(u, d) for r in rs for u, d in r["comms_per_site"].values()}
        totals = sorted(u + d for u, d in counts)
        (u, d), *others = sorted(counts)
        messages = f"{u + d} ({u}/{d})" if not others else f"{totals[0]}-{totals[-1]}"
        expected = all(r["comms_per_site"] == r["expected_per_site"] for r in rs)
        walls = [r["wall_s"] for r in rs]
        out.append(
            f"| {m} | {messages} | {'yes' if expected else 'no'} | {len(rs)} | "
            f"{np.median(walls):.1f} | {min(walls):.1f}-{max(walls):.1f} |"
        )
    return "\n".join(out)


def wall_table(records: list[dict]) -> str:
    """Median wall time per run (s) per method and cell: the cost of the warm start."""
    columns = [m for m in METHODS if any(m in by for by in _cells(records).values())]
    out = ["| data set | N_o | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for (dataset, overlap), by_method in _cells(records).items():
        cells = [f"{np.median([r['wall_s'] for r in by_method[m]]):.1f}" if by_method.get(m) else "" for m in columns]
        out.append(f"| {dataset} | {overlap} | " + " | ".join(cells) + " |")
    return "\n".join(out)


@table(f"{NAME}/auc")
def committed_auc() -> str:
    return auc_table(read_jsonl(COMMITTED / RECORDS))


@table(f"{NAME}/cost")
def committed_cost() -> str:
    return cost_table(read_jsonl(COMMITTED / RECORDS)) + "\n\n" + wall_table(read_jsonl(COMMITTED / RECORDS))


suite(
    Suite(
        name=NAME,
        about="one-shot's tabular_ssl scarf against paper, vanilla and SS-VFL-I, pre-registered (ONESHOT_TABLES.md)",
        runner=run,
        datasets=DATASETS,
        methods=tuple(METHODS),
        seeds=SEEDS,
        settings={"overlaps": OVERLAPS},  # N_o, the aligned labeled training rows
        records=RECORDS,
    )
)
