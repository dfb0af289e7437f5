"""LEADERBOARD.md, "Does joining pay, and where (issue 40)": each method's federated model against what the
label party could do alone, and the blend of both (`blend_own_model`), from the `going_alone` record every
training job writes (protocol/going_alone.py).

Setting, as the leaderboard's: `vflflare split --dataset D --overlap N_o --seed S --label-owner site-1
--active-site-labels` (2 sites, the labels at site-1, which also holds the labels of its own unaligned rows),
N_o = 500, 1000, 2000, seeds 0-2 (job seed = split seed). Every method at the package defaults plus
`label_owner: site-1` and `blend_own_model: true` (FedHSSL with the leaderboard's 10 global iterations), in
process. One run gives the federated model's test AUC, the label party's own model's, the gain with its
interval, and the blend's test AUC: the blend is made only at the final evaluation, so the federated model
is the one the run without it would train.

    vflflare bench run joining --committed   # the 144 runs, resumed where records exist
    vflflare bench tables                    # LEADERBOARD.md's joining/* tables from results/joining.jsonl
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
from vflflare.bench.splits import LABEL_LEADER, prepare_split
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import register
from vflflare.registry import make_config

NAME = "joining"
RECORDS = f"{NAME}.jsonl"
SPLITS = Path("/tmp/vflflare-bench/joining-splits")
DATASETS = {"credit_default": "credit default", "adult": "Adult"}
OVERLAPS = (500, 1000, 2000)
SEEDS = (0, 1, 2)
JOB = {"label_owner": LABEL_LEADER, "blend_own_model": True}
METHODS: dict[str, dict[str, Any]] = {  # the leaderboard's names; FedHSSL last: the slow one
    "vanilla": {"algorithm": "vanilla"},
    "FedBCD": {"algorithm": "fedbcd"},
    "one-shot": {"algorithm": "oneshot"},
    "few-shot": {"algorithm": "fewshot"},
    "SS-VFL-I": {"algorithm": "ssvfl_i"},
    "SS-VFL-C": {"algorithm": "ssvfl_c"},
    "VFLHLP": {"algorithm": "vflhlp"},
    "FedHSSL": {"algorithm": "fedhssl", "global_iterations": 10},  # the leaderboard's (40 is 4x the CPU)
}
ALONE = "label party alone"
MISSING = "-"


def run_one(method: str, dataset: str, overlap: int, seed: int, data_dir: Path) -> dict[str, Any]:
    """One run on the leaderboard's split of (dataset, overlap, seed); the job seed is the split seed."""
    root = prepare_split(data_dir, overlap, seed, SPLITS, dataset, label_owner=LABEL_LEADER, active_site_labels=True)
    config = {**METHODS[method], **JOB}
    start = time.perf_counter()
    result, _ = run_vfl(make_config({**config, "seed": seed}), root)
    if "error" in result:
        raise RuntimeError(f"{method} {dataset} {overlap} seed {seed}: {result['error']}")
    going = result["going_alone"]
    alone = going["alone"]
    per_site = result["communication"]["per_site"]
    return {
        "dataset": dataset,
        "overlap": overlap,
        "seed": seed,
        "method": method,
        "config": config,
        "federated": going["federated"],
        "alone": {
            "model": alone["model"],
            "rows": alone.get("rows"),
            "candidates": alone.get("candidates", {}),
            "test_auc": alone["test_auc"],
        },
        "gain": going["gain"],
        "interval": going["interval"],
        "blend": {"federated_share": going["blend"]["federated_share"], "test_auc": going["blend"]["test_auc"]}
        if "blend" in going
        else None,
        "rows": result["rows"],
        "comms_per_site": {s: [c["uploads"], c["downloads"]] for s, c in per_site.items()},
        "wall_s": round(time.perf_counter() - start, 1),
        "env": environment_record(),
    }


def order(spec: Suite) -> list[tuple[str, int, int, str]]:
    """Dataset by dataset; within one, every method but FedHSSL over every (N_o, seed), then FedHSSL."""
    slow = [m for m in spec.methods if m == "FedHSSL"]
    fast = [m for m in spec.methods if m not in slow]
    grid = [(o, s) for o in spec.settings["overlaps"] for s in spec.seeds]
    return [(d, o, s, m) for d in spec.datasets for group in (fast, slow) for o, s in grid for m in group]


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (dataset, N_o, seed, method) not yet in `out`, appended as each ends."""
    limit_threads()
    done = {(r["dataset"], r["overlap"], r["seed"], r["method"]) for r in read_jsonl(out)}
    for key in order(spec):
        if key in done:
            continue
        record = run_one(key[3], *key[:3], data_dir)
        append_jsonl(out, record)
        blended = record["blend"]["test_auc"] if record["blend"] else float("nan")
        print(
            f"{' '.join(map(str, key))}: federated {record['federated']:.4f}, alone {record['alone']['test_auc']:.4f}"
            f" ({record['alone']['model']}), gain {record['gain']:+.4f}, blend {blended:.4f}, {record['wall_s']} s",
            flush=True,
        )


def _by_cell(records: list[dict], dataset: str) -> dict[tuple[str, int], dict[int, dict]]:
    """(method, N_o) -> seed -> the record, for one dataset."""
    out: dict[tuple[str, int], dict[int, dict]] = defaultdict(dict)
    for r in records:
        if r["dataset"] == dataset:
            out[(r["method"], r["overlap"])][r["seed"]] = r
    return out


def _signed(value: float) -> str:
    return f"{value:+.3f}"


def verdict(intervals: list[list[float]], seeds: int = len(SEEDS)) -> str:
    """ "pays" where the 95 % interval of the gain lies above 0 in every seed, "loses" where below 0 in every
    seed, "" otherwise (or with seeds missing)."""
    if len(intervals) < seeds:
        return ""
    if all(low > 0 for low, _ in intervals):
        return "pays"
    if all(high < 0 for _, high in intervals):
        return "loses"
    return ""


def _seed_mark(interval: list[float]) -> str:
    low, high = interval
    return "↑" if low > 0 else "↓" if high < 0 else ""


def alone_by_seed(cells: dict[tuple[str, int], dict[int, dict]], overlap: int) -> dict[int, list[dict]]:
    """Seed -> the alone records of every method's run there (the same own model: the same rows and seed)."""
    out: dict[int, list[dict]] = defaultdict(list)
    for (_, n), by_seed in cells.items():
        if n == overlap:
            for seed, r in by_seed.items():
                out[seed].append(r["alone"])
    return dict(sorted(out.items()))


def gain_table(records: list[dict], dataset: str) -> str:
    """Rows: the label party alone, then each method; columns: N_o. A method's cell: the median gain over the
    seeds (federated - alone, test AUC), each seed's in brackets (arrow: its 95 % interval excludes 0, up or
    down), and the verdict where every seed's interval agrees."""
    cells = _by_cell(records, dataset)
    head = ["| | " + " | ".join(f"N_o = {n}" for n in OVERLAPS) + " |", "|---|" + "---|" * len(OVERLAPS)]
    alone_row, kind_row = [], []
    for n in OVERLAPS:
        seeds = alone_by_seed(cells, n)
        values = [float(np.median([a["test_auc"] for a in alones])) for alones in seeds.values()]
        alone_row.append(f"{np.median(values):.3f} ({', '.join(f'{v:.3f}' for v in values)})" if values else MISSING)
        kinds = [alones[0]["model"] for alones in seeds.values()]
        kind_row.append(", ".join(kinds) if kinds else MISSING)
    rows = [f"| **{ALONE}**: test AUC | " + " | ".join(alone_row) + " |"]
    rows.append(f"| {ALONE}: its model, per seed | " + " | ".join(kind_row) + " |")
    for kind in ("trees", "neural"):
        values = []
        for n in OVERLAPS:
            seeds = alone_by_seed(cells, n)
            tests = [alones[0]["candidates"][kind]["test_auc"] for alones in seeds.values()]
            values.append(f"{np.median(tests):.3f}" if tests else MISSING)
        rows.append(f"| {ALONE}: its {kind} candidate, test AUC | " + " | ".join(values) + " |")
    for method in METHODS:
        out = []
        for n in OVERLAPS:
            by_seed = dict(sorted(cells.get((method, n), {}).items()))
            if not by_seed:
                out.append(MISSING)
                continue
            gains = [r["gain"] for r in by_seed.values()]
            per_seed = ", ".join(_signed(r["gain"]) + _seed_mark(r["interval"]) for r in by_seed.values())
            word = verdict([r["interval"] for r in by_seed.values()])
            out.append(f"{_signed(float(np.median(gains)))} ({per_seed}){f' **{word}**' if word else ''}")
        rows.append(f"| {method} | " + " | ".join(out) + " |")
    return "\n".join(head + rows)


def blend_table(records: list[dict], dataset: str) -> str:
    """Rows: each method, then a count; columns: N_o. A cell: the delivered blend's test AUC (median over the
    seeds), then the medians of blend - federated and blend - alone, and the median federated share chosen on
    validation. The last row counts the runs whose blend scores below going alone on the test rows."""
    cells = _by_cell(records, dataset)
    out = ["| | " + " | ".join(f"N_o = {n}" for n in OVERLAPS) + " |", "|---|" + "---|" * len(OVERLAPS)]
    counts: dict[int, list[float]] = defaultdict(list)
    for method in METHODS:
        row = []
        for n in OVERLAPS:
            rs = [r for _, r in sorted(cells.get((method, n), {}).items()) if r["blend"]]
            if not rs:
                row.append(MISSING)
                continue
            blended = [r["blend"]["test_auc"] for r in rs]
            versus_fed = [b - r["federated"] for b, r in zip(blended, rs)]
            versus_alone = [b - r["alone"]["test_auc"] for b, r in zip(blended, rs)]
            counts[n] += versus_alone
            share = np.median([r["blend"]["federated_share"] for r in rs])
            row.append(
                f"{np.median(blended):.3f} ({_signed(float(np.median(versus_fed)))}, "
                f"{_signed(float(np.median(versus_alone)))}; {share:.2f})"
            )
        out.append(f"| {method} | " + " | ".join(row) + " |")
    below = [
        f"{sum(d < 0 for d in counts[n])} of {len(counts[n])} (worst {_signed(min(counts[n]))})"
        if counts[n]
        else MISSING
        for n in OVERLAPS
    ]
    out.append("| **runs whose blend is below alone** | " + " | ".join(below) + " |")
    return "\n".join(out)


def committed(build: Any, dataset: str) -> Any:
    return lambda: build(read_jsonl(COMMITTED / RECORDS), dataset)


for _dataset in DATASETS:
    register(f"{NAME}/gain_{_dataset}", committed(gain_table, _dataset))
    register(f"{NAME}/blend_{_dataset}", committed(blend_table, _dataset))


suite(
    Suite(
        name=NAME,
        about="does joining pay: each method's federated model against the label party alone, and the blend",
        runner=run,
        datasets=tuple(DATASETS),
        methods=tuple(METHODS),
        seeds=SEEDS,
        settings={"overlaps": OVERLAPS},  # N_o, the aligned labeled training rows
        records=RECORDS,
    )
)
