"""ONESHOT_TABLES.md, "Why it was not confirmed": what one-shot's local stage does on tables, measured after the
pre-registered comparison was decided (nothing here chooses anything).

The runs of oneshot_tables (same splits, seeds 10-12, labels at the server), with each site's state read in
process (bench/inprocess.InspectableRuntime), for one-shot `paper` and `scarf`:
- how often the k-means temporary labels of the aligned rows agree with their true labels, under the best
  one-to-one naming of the clusters (the paper's premise: the partial gradients cluster by class);
- the AUC of the site's local FixMatch head on its unaligned rows against their true labels, and the share of
  unlabeled rows FixMatch kept as pseudo-labels;
- the one-shot test AUC, beside SS-VFL-I's on the same split (oneshot_tables' records): SS-VFL-I trains its
  head on exactly the warm-started f_k that `scarf` goes on to train with k-means and FixMatch.

    vflflare bench run oneshot_diagnosis --committed   # benchmarks/results/oneshot_diagnosis.jsonl
    vflflare bench tables
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.bench.inprocess import InspectableRuntime, limit_threads, run_vfl
from vflflare.bench.paths import COMMITTED
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.splits import prepare_split, source_table
from vflflare.bench.suite import Suite, suite
from vflflare.bench.suites.imbalance import class_map, site_diagnostics
from vflflare.bench.suites.oneshot_tables import DATASETS, METHODS, RECORDS, SEEDS, SPLITS
from vflflare.bench.tables import table
from vflflare.registry import make_config

NAME = "oneshot_diagnosis"
VARIANTS = ("one-shot paper", "one-shot scarf")


def run_one(variant: str, dataset: str, overlap: int, seed: int, data_dir: Path) -> dict[str, Any]:
    root = prepare_split(data_dir, overlap, seed, SPLITS, dataset)
    result, runtimes = run_vfl(make_config({**METHODS[variant], "seed": seed}), root, InspectableRuntime)
    truth = source_table(data_dir, dataset)
    sites = {}
    for site, runtime in runtimes.items():
        aligned = truth.y(runtime.ids("aligned"))
        clusters = runtime.temporary_labels()
        agreement = float(np.mean(class_map(clusters, aligned, 2)[clusters] == aligned))
        local = site_diagnostics(runtime, truth)
        sites[site] = {
            "cluster_agreement": agreement,
            "local_auc": local["oneshot_local_auc"],
            "pseudo_label_rate": local["oneshot_mask_rate"],
        }
    return {
        "dataset": dataset,
        "overlap": overlap,
        "seed": seed,
        "variant": variant,
        "test_auc": result["metrics"]["test_auc"],
        "sites": sites,
        "env": environment_record(),
    }


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    limit_threads()
    done = {(r["dataset"], r["overlap"], r["seed"], r["variant"]) for r in read_jsonl(out)}
    for dataset in spec.datasets:
        for overlap in spec.settings["overlaps"]:
            for seed in spec.seeds:
                for variant in spec.methods:
                    if (dataset, overlap, seed, variant) not in done:
                        append_jsonl(out, run_one(variant, dataset, overlap, seed, data_dir))
                        print(f"{dataset} {overlap} seed {seed} {variant}: done", flush=True)


def diagnosis_table(records: list[dict], tables: list[dict]) -> str:
    """Per (data set, N_o, variant): medians over seeds of the site means."""
    ssvfl = defaultdict(list)
    for r in tables:
        if r["method"] == "SS-VFL-I":
            ssvfl[(r["dataset"], r["overlap"])].append(r["metrics"]["test_auc"])
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        cells[(r["dataset"], r["overlap"], r["variant"])].append(r)
    lines = [
        "| data set | N_o | one-shot | k-means labels agreeing with the truth | local head AUC, unaligned rows "
        "| pseudo-labels kept | test AUC | SS-VFL-I test AUC |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (dataset, overlap, variant), rs in sorted(cells.items(), key=lambda kv: (DATASETS.index(kv[0][0]), kv[0][1:])):

        def med(key: str, rs: list[dict] = rs) -> float:
            return float(np.median([np.mean([s[key] for s in r["sites"].values()]) for r in rs]))

        lines.append(
            f"| {dataset} | {overlap} | {variant.removeprefix('one-shot ')} | {med('cluster_agreement'):.3f} | "
            f"{med('local_auc'):.3f} | {med('pseudo_label_rate'):.2f} | "
            f"{np.median([r['test_auc'] for r in rs]):.4f} | {np.median(ssvfl[(dataset, overlap)]):.4f} |"
        )
    return "\n".join(lines)


@table(f"{NAME}/sites")
def committed_diagnosis() -> str:
    return diagnosis_table(read_jsonl(COMMITTED / f"{NAME}.jsonl"), read_jsonl(COMMITTED / RECORDS))


suite(
    Suite(
        name=NAME,
        about="why one-shot's scarf change was not confirmed: k-means agreement, local head AUC (ONESHOT_TABLES.md)",
        runner=run,
        datasets=DATASETS,
        methods=VARIANTS,
        seeds=SEEDS,
        settings={"overlaps": (1000,)},
        records=f"{NAME}.jsonl",
    )
)
