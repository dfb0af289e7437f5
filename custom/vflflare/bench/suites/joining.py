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
from pathlib import Path
from typing import Any

from vflflare.bench.inprocess import limit_threads, run_vfl
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.splits import LABEL_LEADER, prepare_split
from vflflare.bench.suite import Suite, suite
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
