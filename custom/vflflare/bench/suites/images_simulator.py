"""Image algorithms in the NVFlare simulator: MNIST and CIFAR-10 halves (or quadrants: sites 4).

Default (small subsets, short runs): every algorithm runs end to end on image strips, with the
communication its protocol implies and the in-process metrics. With `rows` "all" it is the issue's
headline instead: all of MNIST, N_o 256, one-shot against vanilla, several seeds.

    vflflare bench run images_simulator                                               # every algorithm, small
    vflflare bench run images_simulator --datasets mnist --set rows=all --seeds 0 1 2 \
        --methods vanilla vanilla+paper_budget oneshot --set reference=false          # headline
    vflflare bench run images_simulator --datasets mnist --set sites=4 --set label_owner=site-3  # quadrants

Training MB is a site's payload less its test-row representations, which every method uploads once
(inference traffic, n_test x rep_dim x 4 B). IMAGES_REPORT's tables are built from the runs' records,
committed as benchmarks/results/images_small.jsonl, images_k4.jsonl and images_mnist_all.jsonl (`--out` one
of them); splits, jobs and workspaces go to the `work` folder.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from vflflare.bench.paths import COMMITTED
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import register
from vflflare.data.split import parse_sites
from vflflare.data.split.dataset import split_dataset, synthetic_options
from vflflare.jobs import write_job
from vflflare.protocol.inprocess import run_inprocess
from vflflare.registry import make_config
from vflflare.simulation import simulate

SHORT = {"ssl_epochs": 5, "split_epochs": 10, "split_patience": 10, "pretrain_epochs": 5}
# method name -> its settings over the algorithm's defaults; "+name" marks a variant
METHODS = {
    "vanilla": {},
    "fedbcd": {},
    "oneshot": {},
    "fewshot": {},
    "fewshot+finetune": {"finetune_epochs": 5},
    "ssvfl_i": {},
    "ssvfl_c": {},
    # Table 1's protocol for the baselines: 1000 epochs, no early stopping (the best validation epoch is kept)
    "vanilla+paper_budget": {"split_epochs": 1000, "split_patience": 1000},
}


def settings_for(method: str, short: bool, extra: dict) -> dict:
    algorithm = method.split("+")[0]
    known = make_config(algorithm=algorithm).to_dict()
    chosen = {**(SHORT if short else {}), **extra}
    return {"algorithm": algorithm, **{k: v for k, v in chosen.items() if k in known}, **METHODS[method]}


def split_for(work: Path, data_dir: Path, dataset: str, rows: str, seed: int, sites: int, label_owner: str) -> Path:
    """`vflflare split --overlap 256 --label-owner OWNER [--train-rows T --test-rows E]` once per argument set."""
    split = work / "splits" / f"{dataset}_{rows.replace(',', '_')}_k{sites}_{label_owner}_s{seed}"
    if not (split / "manifest.json").exists():
        train_rows, test_rows = (None, None) if rows == "all" else map(int, rows.split(","))
        split_dataset(
            dataset,
            str(data_dir),
            parse_sites(str(sites)),
            256,
            seed,
            str(split),
            label_owner=label_owner,
            train_rows=train_rows,
            test_rows=test_rows,
            synthetic=synthetic_options(dataset, seed, None, None, None),
        )
    return split


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Each (dataset, seed, method) as a simulator job (and, with `reference`, in process), appended to `out`;
    fails after the table when a run erred, counted other messages than its protocol, or left the in-process
    numbers."""
    settings = spec.settings
    work, rows_setting, sites, owner = (
        Path(settings["work"]),
        str(settings["rows"]),
        settings["sites"],
        settings["label_owner"],
    )
    extra = dict(settings["job"])
    rows = []
    for dataset in spec.datasets:
        for seed in spec.seeds:
            split = split_for(work, data_dir, dataset, rows_setting, seed, sites, owner)
            for method in spec.methods:
                config = {**settings_for(method, rows_setting != "all", extra), "seed": seed, "label_owner": owner}
                job = write_job(work / "jobs", f"{dataset}_{method.replace('+', '_')}_s{seed}", config, min_sites=sites)
                started = time.monotonic()
                results = simulate(str(job), str(work / "ws" / job.name), sites, sites, str(split), timeout=7200)
                wall = time.monotonic() - started
                comm = results["communication"]["per_site"]
                expected = results["expected_communication"]
                inference = results["rows"]["test"] * results["config"]["rep_dim"] * 4
                row = {
                    "dataset": dataset,
                    "seed": seed,
                    "method": method,
                    "error": results.get("error"),
                    "test_accuracy": results["metrics"].get("test_accuracy"),
                    "per_site": {
                        s: [
                            c["uploads"],
                            c["downloads"],
                            round(c["payload_bytes"] / 1e6, 3),
                            round((c["payload_bytes"] - inference) / 1e6, 3),
                        ]
                        for s, c in comm.items()
                    },
                    "as_expected": all(
                        [comm[s]["uploads"], comm[s]["downloads"]] == [expected[s]["uploads"], expected[s]["downloads"]]
                        for s in comm
                    ),
                    "phases_s": results["phases"],
                    "wall_s": round(wall, 1),
                    "settings": config,
                    "env": environment_record(),
                }
                if settings["reference"]:
                    names = [f"site-{k}" for k in range(1, sites + 1)]
                    reference = run_inprocess(make_config(**config), names, str(split))
                    row["same_as_inprocess"] = (
                        results["metrics"] == reference["metrics"] and comm == reference["communication"]["per_site"]
                    )
                print(json.dumps(row), flush=True)
                append_jsonl(out, row)
                rows.append(row)
    print("\n" + table(rows))
    if not all(not r["error"] and r["as_expected"] and r.get("same_as_inprocess", True) for r in rows):
        raise RuntimeError("a run erred, counted other messages than its protocol says, or left the in-process numbers")


def table(rows: list[dict]) -> str:
    out = [
        "| dataset | method | seeds | test accuracy | site-1 up/down | payload MB | training MB | counts as the "
        "protocol says | same as in process | simulator wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], r["method"]), []).append(r)
    for (dataset, method), runs in groups.items():
        accuracy = [r["test_accuracy"] for r in runs]
        site = [r["per_site"]["site-1"] for r in runs]
        same = {r.get("same_as_inprocess") for r in runs}
        out.append(
            f"| {dataset} | {method} | {len(runs)} | {statistics.median(accuracy):.3f}; "
            f"{', '.join(f'{a:.3f}' for a in accuracy)} | "
            f"{statistics.median(s[0] for s in site):.0f}/{statistics.median(s[1] for s in site):.0f} | "
            f"{statistics.median(s[2] for s in site):.3f} | {statistics.median(s[3] for s in site):.3f} | "
            f"{'yes' if all(r['as_expected'] for r in runs) else 'NO'} | "
            f"{'not rerun' if same == {None} else 'yes' if same == {True} else 'NO'} | "
            f"{statistics.median(r['wall_s'] for r in runs):.0f} |"
        )
    return "\n".join(out)


def committed_table(name: str) -> str:
    """The table of a run committed as benchmarks/results/NAME.jsonl."""
    return table(read_jsonl(COMMITTED / f"{name}.jsonl"))


HEADLINE = {
    "vanilla": "vanilla (early stopping)",
    "vanilla+paper_budget": "vanilla, paper budget (1 000 epochs)",
    "oneshot": "**one-shot VFL**",
}
CIFAR_HEADLINE = {"vanilla": "vanilla (early stopping)", "oneshot": "**one-shot VFL** (`ssl_epochs` 10)"}
CIFAR_PAPER = (
    "| *paper, Table 1, WRN: vanilla / one-shot* | *0.315 / 0.782* | *8 000 / 3 (whole job)* | | "
    "*262 / 0.79 (whole job)* | |"
)  # quoted from the paper, beside ours


def _thousands(n: float) -> str:
    return f"{n:,.0f}".replace(",", " ")


def headline_table(name: str = "images_mnist_all", methods: dict[str, str] = HEADLINE, quoted: str = "") -> str:
    """IMAGES_REPORT's `rows` "all" tables from benchmarks/results/NAME.jsonl (seeds 0-2), with a quoted row."""
    records = read_jsonl(COMMITTED / f"{name}.jsonl")
    out = [
        "| method | test accuracy, median (seeds 0, 1, 2) | comms / site (up + down) | payload MB / site | "
        "**training MB / site** | simulator wall s, median |",
        "|---|---|---|---|---|---|",
    ]
    for method, label in methods.items():
        runs = sorted((r for r in records if r["method"] == method), key=lambda r: r["seed"])
        if not runs:
            continue
        site = [r["per_site"]["site-1"] for r in runs]
        up, down = (statistics.median(s[i] for s in site) for i in (0, 1))
        per_seed = ", ".join(f"{r['test_accuracy']:.3f}" for r in runs)
        comms = f"{_thousands(up + down)} ({_thousands(up)} + {_thousands(down)})"
        out.append(
            f"| {label} | {statistics.median(r['test_accuracy'] for r in runs):.3f} ({per_seed}) | {comms} | "
            f"{statistics.median(s[2] for s in site):.3f} | {statistics.median(s[3] for s in site):.3f} | "
            f"{statistics.median(r['wall_s'] for r in runs):.0f} |"
        )
    return "\n".join(out + ([quoted] if quoted else []))


def cifar_table() -> str:
    return headline_table("images_cifar_all", CIFAR_HEADLINE, CIFAR_PAPER)


register("images_mnist_all", headline_table)
register("images_cifar_all", cifar_table)
for _name in ("images_small", "images_k4"):
    register(f"images/{_name}", lambda name=_name: committed_table(name))

suite(
    Suite(
        name="images_simulator",
        about="image algorithms in the NVFlare simulator on MNIST and CIFAR-10 strips (IMAGES_REPORT.md)",
        runner=run,
        datasets=("mnist", "cifar10"),
        methods=tuple(m for m in METHODS if m != "vanilla+paper_budget"),
        more_methods=("vanilla+paper_budget",),
        seeds=(0,),
        settings={
            "rows": "1200,400",  # TRAIN,TEST images per split, or "all" (full-length runs)
            "sites": 2,  # 2: halves, 4: quadrants
            "label_owner": "server",  # server or a site name
            "job": {},  # settings for every method
            "reference": True,  # rerun each in process (the same numbers)
            "work": "/tmp/vflflare_images_sim",  # splits, jobs, simulator workspaces
        },
    )
)
