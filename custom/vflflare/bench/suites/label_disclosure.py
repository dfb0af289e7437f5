"""How much of the labels one-shot VFL's single gradient download gives a feature party.

Runs one-shot VFL's first two steps on credit default (representations of the aligned rows up, partial
gradients down), lets each site cluster its gradients exactly as its ClientUpdate does (k-means on the
row directions, Alg. 1 line 28) and scores the clusters against the true labels of the aligned rows
(best one-to-one renaming). Also shown: the majority-class rate, what "learned nothing" would score.

    vflflare bench run label_disclosure --committed --set overlaps='[1000, 2000]'   # appends to RESULTS
    vflflare bench tables                                  # REPORT.md's table from the committed records
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from vflflare.algorithms.blocks.kmeans import kmeans_on_gradients
from vflflare.algorithms.blocks.representations import reps_of, upload_representations
from vflflare.algorithms.oneshot import OneShotVFL
from vflflare.attacks.leak import cluster_label_agreement
from vflflare.bench.inprocess import limit_threads
from vflflare.bench.paths import COMMITTED, DEFAULT_SPLITS
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.splits import SITES, SourceTable, job_rows, prepare_split
from vflflare.bench.stats import mean_std
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import table as register_table
from vflflare.data.loading import DataRequest, load_label_tables
from vflflare.protocol.inprocess import InProcessTransport
from vflflare.protocol.run_context import RunContext
from vflflare.protocol.setup import SERVER, SetupInputs, setup_parties
from vflflare.protocol.site_runtime import SiteRuntime
from vflflare.registry import make_config
from vflflare.seeding import derive_seed
from vflflare.tracking import LogTracker

RESULTS = COMMITTED / "label_disclosure.jsonl"  # compact records: numbers and settings


def measure(root: Path, seed: int, table: SourceTable, overrides: dict) -> dict[str, float]:
    cfg = make_config({**overrides, "algorithm": "oneshot", "seed": seed})
    net = InProcessTransport({s: SiteRuntime(s, str(root)) for s in SITES})
    loader = partial(load_label_tables, SERVER, DataRequest(SITES, str(root), seed))
    label, _, _ = setup_parties(SetupInputs(net, cfg, OneShotVFL.Label, loader, LogTracker("bench.disclosure")))
    grads = label.partial_gradients(reps_of(upload_representations(RunContext(net), ["aligned"]), "aligned"))
    truth = table.y(job_rows(root, seed, cfg.val_fraction).train_ids)  # canonical order = gradient row order
    out = {"majority_rate": float(np.bincount(truth).max() / len(truth))}
    for site in SITES:
        clusters = kmeans_on_gradients(grads[site], 2, derive_seed(seed, site))
        out[site] = cluster_label_agreement(clusters, truth)
    return out


def tables(records: list[dict]) -> str:
    """REPORT.md §5: per N_o and label-party head, mean ± std over seeds of each site's cluster-label
    agreement and of the majority-class rate."""
    lines = [
        "| N_o | label party's head | seeds | agreement site-1 | agreement site-2 | majority rate |",
        "|---|---|---|---|---|---|",
    ]
    for overlap, hidden in sorted({(r["overlap"], r["classifier_hidden"]) for r in records}):
        rows = [r for r in records if r["overlap"] == overlap and r["classifier_hidden"] == hidden]
        head = "linear (default)" if hidden == 0 else f"MLP (hidden {hidden})"
        cells = [mean_std([r[k] for r in rows]) for k in (*SITES, "majority_rate")]
        lines.append(f"| {overlap} | {head} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (N_o, seed, head) of the spec, appended to `out` (no resume: a rerun appends again)."""
    limit_threads()
    source = SourceTable(data_dir)
    env = environment_record()
    for overlap in spec.settings["overlaps"]:
        for seed in spec.seeds:
            root = prepare_split(data_dir, overlap, seed, DEFAULT_SPLITS)
            for hidden in spec.settings["classifier_hidden"]:
                record = measure(root, seed, source, {"classifier_hidden": hidden})
                append_jsonl(out, {"overlap": overlap, "seed": seed, "classifier_hidden": hidden, **record, "env": env})
    print(tables(read_jsonl(out)))


@register_table("label_disclosure")
def committed_tables() -> str:
    return tables(read_jsonl(RESULTS))


suite(
    Suite(
        name="label_disclosure",
        about="how much of the labels one-shot VFL's single gradient download gives a feature party (REPORT.md)",
        runner=run,
        datasets=("credit_default",),
        seeds=(0, 1, 2),
        # classifier_hidden: the label party's head, 0 = linear (the default), else one ReLU hidden layer
        settings={"overlaps": (1000,), "classifier_hidden": (0, 64)},
        records="label_disclosure.jsonl",
    )
)
