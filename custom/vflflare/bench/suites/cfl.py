"""CFL on silo spaces (Ginanjar et al., Tables 2-5): Adult in 5 silos (21 encoded columns each) and
MNIST in 4 silos (196 pixels each), the four settings (standard, data_imbalance, class_imbalance,
mixed), seeds 0-2.

Per silo, test accuracy of a logistic regression on
- CFL: the silo's rows encoded by the federated encoder (package defaults: 10 rounds);
- local CL: the same training without FedAvg (`cfl_fedavg: false`), the paper's non-FL contrastive line;
- LL: the silo's raw slice;
and the paper's delta accuracy: the accuracy of a logistic regression on the (imaginary) global table
(every column, every training row; no party holds it, only this suite) minus the silo's. Smaller is
better; the tables give the mean over silos, median over seeds.

MNIST is reduced for CPU: 10 000 training and 2 000 test images (`vflflare split --train-rows/--test-rows`), pooled and
split 80/20 like any silo space (9 600 / 2 400 rows).

    vflflare bench run cfl --committed --methods CFL --seeds 0 1 2
    vflflare bench run cfl --committed --methods "local CL" --set settings='["standard"]' --seeds 0 1 2

Records go (with --committed) to benchmarks/results/cfl.jsonl (`vflflare bench tables` rebuilds the
report's tables from it); a rerun skips the (dataset, setting, seed, method) cells it already holds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vflflare.bench.inprocess import limit_threads, run_vfl
from vflflare.bench.paths import COMMITTED
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import table
from vflflare.data.image_sources import IMAGE_SOURCES
from vflflare.data.split import parse_sites
from vflflare.data.split.dataset import split_silo_dataset, synthetic_options
from vflflare.data.split.silo import SETTINGS
from vflflare.registry import make_config

RESULTS = COMMITTED / "cfl.jsonl"
SPLITS = Path("/tmp/vflflare-bench/cfl-splits")
SILOS = {"adult": 5, "mnist": 4}
IMAGE_ROWS = {"mnist": (10000, 2000)}
METHODS = {"CFL": {}, "local CL": {"cfl_fedavg": False}}
NAMES = {"adult": "Adult", "mnist": "MNIST"}
# Tables 2-5 of the paper, delta accuracy (CFL, LL); MNIST's mixed setting there has 16 silos
PAPER = {
    "income": {
        "standard": (0.041, 0.063),
        "data_imbalance": (0.039, 0.063),
        "class_imbalance": (0.046, 0.063),
        "mixed": (0.042, 0.063),
    },
    "MNIST": {
        "standard": (0.040, 0.075),
        "data_imbalance": (0.030, 0.079),
        "class_imbalance": (0.032, 0.097),
        "mixed": (0.179, 0.347),
    },
}


def split_settings(dataset: str, setting: str | None, seed: int) -> dict:
    """The `vflflare split --silo-space` arguments a record's split was made with."""
    rows = IMAGE_ROWS.get(dataset)
    return {
        "dataset": dataset,
        "sites": SILOS[dataset],
        "silo_setting": setting,
        "seed": seed,
        **({"train_rows": rows[0], "test_rows": rows[1]} if rows else {}),
    }


def split_for(data_dir: Path, dataset: str, setting: str, seed: int) -> Path:
    """`vflflare split --silo-space --silo-setting SETTING` once per argument set."""
    out = SPLITS / f"{dataset}_{SILOS[dataset]}_{setting}_s{seed}"
    if not (out / "manifest.json").exists():
        rows = IMAGE_ROWS.get(dataset)
        try:
            split_silo_dataset(
                dataset,
                str(data_dir),
                parse_sites(str(SILOS[dataset])),
                seed,
                str(out),
                setting=setting,
                train_rows=rows[0] if rows else None,
                test_rows=rows[1] if rows else None,
                synthetic=None if dataset in IMAGE_SOURCES else synthetic_options(dataset, seed, None, None, None),
            )
        except ValueError as error:
            raise RuntimeError(f"silo split failed: {dataset} {setting} seed {seed}: {error}") from error
    return out


def global_accuracy(data_dir: Path, dataset: str, seed: int) -> float:
    """LR on the (imaginary) global table: the standard setting's silos side by side (same seed: the same
    columns and test rows as every setting), every training row."""
    root = split_for(data_dir, dataset, "standard", seed)
    sites = [f"site-{i + 1}" for i in range(SILOS[dataset])]

    def joined(table: str) -> tuple[np.ndarray, np.ndarray]:
        parts = [pd.read_csv(root / s / f"{table}.csv").set_index("id") for s in sites]
        labels = parts[0]["label"].to_numpy()
        return pd.concat([p.drop(columns="label") for p in parts], axis=1).to_numpy(), labels

    (train_x, train_y), (test_x, test_y) = joined("train"), joined("test")
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=seed))
    return float(model.fit(train_x, train_y).score(test_x, test_y))


def run_one(dataset: str, setting: str, seed: int, method: str, data_dir: Path) -> dict:
    root = split_for(data_dir, dataset, setting, seed)
    sites = [f"site-{i + 1}" for i in range(SILOS[dataset])]
    start = time.perf_counter()
    result, _ = run_vfl(make_config({"algorithm": "cfl", "seed": seed, **METHODS[method]}), root, sites=sites)
    if "error" in result:
        raise RuntimeError(f"CFL {dataset} {setting} seed {seed}: {result['error']}")
    per_site = result["communication"]["per_site"]
    return {
        "dataset": dataset,
        "setting": setting,
        "seed": seed,
        "method": method,
        "metrics": result["metrics"],
        "rows": result["rows"],
        "mb_per_site": {s: round(c["payload_bytes"] / 1e6, 3) for s, c in per_site.items()},
        "comms_per_site": {s: [c["uploads"], c["downloads"]] for s, c in per_site.items()},
        "wall_s": round(time.perf_counter() - start, 1),
        "split": split_settings(dataset, setting, seed),
        "config": result["config"],
        "env": environment_record(),
    }


def deltas(record: dict, global_acc: float, prefix: str = "") -> list[float]:
    return [
        global_acc - v
        for k, v in record["metrics"].items()
        if k.startswith("site-") and k.endswith(f"_{prefix}test_accuracy") and (prefix or "_ll_" not in k)
    ]


def affected_gain(record: dict) -> float | None:
    """Mean over the silos a setting made imbalanced (silo_split: the first one, and the second in mixed)
    of CFL's accuracy minus LL's on that silo; None in the standard setting."""
    silos = {"standard": [], "data_imbalance": ["site-1"], "class_imbalance": ["site-1"], "mixed": ["site-1", "site-2"]}
    affected = silos[record["setting"]]
    if not affected:
        return None
    m = record["metrics"]
    return float(np.mean([m[f"{s}_test_accuracy"] - m[f"{s}_ll_test_accuracy"] for s in affected]))


def tables(records: list[dict]) -> str:
    """The report's two tables: delta accuracy per dataset and setting (mean over silos; median over seeds,
    per seed in brackets), then CFL vs LL side by side with the paper's Tables 2-5."""
    glob = {(r["dataset"], r["seed"]): r["accuracy"] for r in records if r.get("method") == "global LR"}
    cells: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in sorted(records, key=lambda r: r["seed"]):
        if r.get("method") not in METHODS or (r["dataset"], r["seed"]) not in glob:
            continue
        g = glob[(r["dataset"], r["seed"])]
        cells[(r["dataset"], r["setting"])][r["method"]].append(float(np.mean(deltas(r, g))))
        if r["method"] == "CFL":
            cells[(r["dataset"], r["setting"])]["LL"].append(float(np.mean(deltas(r, g, "ll_"))))
            if affected_gain(r) is not None:
                cells[(r["dataset"], r["setting"])]["affected"].append(affected_gain(r))

    def fmt(values: list[float], sign: str = "") -> str:
        return f"{np.median(values):{sign}.3f} ({', '.join(f'{x:.3f}' for x in values)})" if values else ""

    order = sorted(cells, key=lambda k: (list(SILOS).index(k[0]), SETTINGS.index(k[1])))
    out = [
        "| dataset | setting | CFL | local CL | LL | CFL beats LL | imbalanced silos: CFL - LL accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    for dataset, setting in order:
        by = cells[(dataset, setting)]
        wins = sum(c < alone for c, alone in zip(by["CFL"], by["LL"]))
        out.append(
            f"| {NAMES[dataset]} | {setting} | {fmt(by['CFL'])} | {fmt(by['local CL'])} | {fmt(by['LL'])} "
            f"| {wins}/{len(by['CFL'])} seeds | {fmt(by['affected'], '+')} |"
        )
    out += [
        "",
        "Global logistic regression accuracy: "
        + "; ".join(
            f"{NAMES[d]} " + ", ".join(f"{glob[(d, s)]:.4f}" for s in sorted(s for dd, s in glob if dd == d))
            for d in SILOS
            if any(dd == d for dd, _ in glob)
        )
        + " (seeds "
        + ", ".join(str(s) for s in sorted({s for _, s in glob}))
        + ").",
    ]

    def pair(dataset: str, setting: str) -> str:
        by = cells.get((dataset, setting), {})
        return f"{np.median(by['CFL']):.3f} vs {np.median(by['LL']):.3f}" if by.get("CFL") else ""

    out += ["", "| setting | Adult here | paper, income | MNIST here | paper, MNIST |", "|---|---|---|---|---|"]
    for setting in SETTINGS:
        paper = {k: f"{v[setting][0]:.3f} vs {v[setting][1]:.3f}" for k, v in PAPER.items()}
        out.append(
            f"| {setting} | {pair('adult', setting)} | {paper['income']} | {pair('mnist', setting)} "
            f"| {paper['MNIST']}{' (16 silos)' if setting == 'mixed' else ''} |"
        )
    return "\n".join(out)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """The global LR per (dataset, seed), then every (setting, method) cell not yet in `out`."""
    limit_threads()
    done = {(r["dataset"], r.get("setting"), r["seed"], r["method"]) for r in read_jsonl(out)}
    for dataset in spec.datasets:
        for seed in spec.seeds:
            if (dataset, None, seed, "global LR") not in done:
                append_jsonl(
                    out,
                    {
                        "dataset": dataset,
                        "seed": seed,
                        "method": "global LR",
                        "accuracy": global_accuracy(data_dir, dataset, seed),
                        "split": split_settings(dataset, "standard", seed),
                        "model": "StandardScaler + LogisticRegression(max_iter=1000, random_state=seed)",
                        "env": environment_record(),
                    },
                )
            for setting in spec.settings["settings"]:
                for method in spec.methods:
                    if (dataset, setting, seed, method) in done:
                        continue
                    record = run_one(dataset, setting, seed, method, data_dir)
                    append_jsonl(out, record)
                    print(
                        f"{dataset} {setting} seed {seed} {method}: mean silo accuracy "
                        f"{record['metrics']['test_accuracy']:.4f} (LL "
                        f"{record['metrics']['ll_test_accuracy']:.4f}), "
                        f"{record['wall_s']} s",
                        flush=True,
                    )


@table("cfl")
def committed_tables() -> str:
    return tables(read_jsonl(RESULTS))


suite(
    Suite(
        name="cfl",
        about="CFL on silo spaces against local CL and the silo alone (CFL_REPORT.md)",
        runner=run,
        datasets=tuple(SILOS),
        methods=tuple(METHODS),
        seeds=(0, 1, 2),
        settings={"settings": tuple(SETTINGS)},  # the silo settings (`vflflare split --silo-setting`)
        records="cfl.jsonl",
    )
)
