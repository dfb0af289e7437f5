"""VFLHLP against its ablations, the active party alone and the other vflflare algorithms on real tables
(Li et al., Tables 2-3 and Fig. 5 protocol, on credit default and Adult instead of Avazu and Criteo).

Setting: `vflflare split --sites K --overlap N --label-owner site-1 --active-site-labels`: 20 % of the rows
are test rows every party holds; N aligned training rows (all labeled, 20 % of them validation); the
other rows are spread evenly over the K parties, and the active party site-1 holds the labels of its own.
N = 250, 1000, 4000 (about 1 %, 4 % and 17 % of the training rows); K = 2 and 3; seeds 0-2.

Methods, every one on the same split: VFLHLP, VFLHLP-A, VFLHLP-P and Local-A (configs of the one
plug-in), vanilla split NN, SS-VFL-C, one-shot, and FedHSSL (10 global iterations, K = 2). Package
defaults otherwise. Runs go through the in-process driver, which gives the simulator's numbers exactly
(tests/test_vflhlp_simulator.py).

    vflflare bench run vflhlp --datasets credit_default:2 --set aligned=[250,1000,4000] --seeds 0 1 2
    vflflare bench run vflhlp --set select_beta=true   # beta on validation AUC, split seed 9 (not a test seed)
    vflflare bench tables        # VFLHLP_REPORT.md's tables from the committed records (results/vflhlp.jsonl)

The suite's datasets are settings DATASET:K (K parties).
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

RESULTS = COMMITTED / "vflhlp.jsonl"  # compact records: numbers and settings
SPLITS = Path("/tmp/vflflare-bench/vflhlp-splits")
SETTINGS = ["credit_default:2", "credit_default:3", "adult:2", "adult:3"]
ALIGNED = [250, 1000, 4000]
ACTIVE = "site-1"
METHODS: dict[str, dict[str, Any]] = {
    "VFLHLP": {"algorithm": "vflhlp"},
    "VFLHLP-A": {"algorithm": "vflhlp", "variant": "vflhlp_a"},
    "VFLHLP-P": {"algorithm": "vflhlp", "variant": "vflhlp_p"},
    "Local-A": {"algorithm": "vflhlp", "variant": "local_a"},
    "vanilla": {"algorithm": "vanilla"},
    "SS-VFL-C": {"algorithm": "ssvfl_c"},
    "one-shot": {"algorithm": "oneshot"},
    "FedHSSL": {"algorithm": "fedhssl", "global_iterations": 10},
}
BETAS = [0.0, 0.01, 0.1, 1.0, 10.0]
SELECTION_SEED = 9


def parse_setting(setting: str) -> tuple[str, list[str]]:
    dataset, _, parties = setting.partition(":")
    return dataset, [f"site-{i + 1}" for i in range(int(parties or 2))]


def test_metric(record: dict) -> float:
    return next(v for k, v in record["metrics"].items() if k.startswith("test_"))


def run_one(method: str, setting: str, aligned: int, seed: int, overrides: dict, data_dir: Path, splits: Path) -> dict:
    dataset, sites = parse_setting(setting)
    root = prepare_split(data_dir, aligned, seed, splits, dataset, len(sites), ACTIVE, active_site_labels=True)
    start = time.perf_counter()
    result, _ = run_vfl(
        make_config({**METHODS[method], **overrides, "seed": seed, "label_owner": ACTIVE}), root, sites=sites
    )
    if "error" in result:
        raise RuntimeError(f"{method} {setting} {aligned} seed {seed}: {result['error']}")
    wall: dict[str, float] = defaultdict(float)
    for phase in result.get("phases", []):
        wall[phase["name"]] += phase["wall_s"]
    per_site = result["communication"]["per_site"]
    return {
        "setting": setting,
        "aligned": aligned,
        "seed": seed,
        "method": method,
        "overrides": overrides,
        "metrics": result["metrics"],
        "rows": result["rows"],
        "info": result.get("training", {}),
        "comms_per_site": {s: [c["uploads"], c["downloads"]] for s, c in per_site.items()},
        "mb_per_site": {s: round(c["payload_bytes"] / 1e6, 3) for s, c in per_site.items()},
        "phase_wall_s": {p: round(s, 1) for p, s in wall.items()},
        "wall_s": round(time.perf_counter() - start, 1),
        "env": environment_record(),
    }


def _groups(records: list[dict]) -> dict[tuple, dict[str, list[dict]]]:
    groups: dict[tuple, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if "beta_selection" not in r:
            groups[(r["setting"], r["aligned"])][r["method"]].append(r)
    return groups


def auc_table(records: list[dict]) -> str:
    """Test AUC per method: median over seeds, the seeds in brackets."""
    groups = _groups(records)
    columns = [m for m in METHODS if any(m in g for g in groups.values())]
    out = [
        "| setting | aligned | " + " | ".join(columns) + " | VFLHLP - vanilla |",
        "|---|---|" + "---|" * (len(columns) + 1),
    ]
    for (setting, aligned), by_method in sorted(groups.items()):
        cells, medians = [], {}
        for m in columns:
            values = [test_metric(r) for r in sorted(by_method.get(m, []), key=lambda r: r["seed"])]
            medians[m] = np.median(values) if values else None
            cells.append(f"{medians[m]:.3f} ({', '.join(f'{v:.3f}' for v in values)})" if values else "")
        delta = (
            f"{medians['VFLHLP'] - medians['vanilla']:+.3f}"
            if medians.get("VFLHLP") is not None and medians.get("vanilla") is not None
            else ""
        )
        out.append(f"| {setting} | {aligned} | " + " | ".join(cells) + f" | {delta} |")
    return "\n".join(out)


def communication_table(records: list[dict], setting: str = "credit_default:2") -> str:
    """Messages and MB per site on seed 0, and the median wall time, for one setting."""
    out = [
        "| setting | aligned | method | uploads/downloads, active site | passive site | MB, active | passive | "
        "wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (name, aligned), by_method in sorted(_groups(records).items()):
        for m in (m for m in METHODS if by_method.get(m) and name == setting):
            rs = sorted(by_method[m], key=lambda r: r["seed"])
            r = rs[0]
            passive = next(s for s in r["comms_per_site"] if s != ACTIVE)
            out.append(
                f"| {name} | {aligned} | {m} | {'/'.join(map(str, r['comms_per_site'][ACTIVE]))} | "
                f"{'/'.join(map(str, r['comms_per_site'][passive]))} | {r['mb_per_site'][ACTIVE]:.2f} | "
                f"{r['mb_per_site'][passive]:.2f} | {np.median([x['wall_s'] for x in rs]):.0f} |"
            )
    return "\n".join(out)


def beta_table(records: list[dict]) -> str:
    """VFLHLP's validation AUC per beta (split seed SELECTION_SEED); the package default in bold, and the
    best mean over the cells."""
    val: dict[tuple, dict[float, float]] = defaultdict(dict)
    for r in records:
        if "beta_selection" in r:
            val[(r["setting"], r["aligned"])][r["beta_selection"]] = next(
                v for k, v in r["metrics"].items() if k.startswith("val_")
            )
    if not val:
        return ""
    betas = sorted({b for cell in val.values() for b in cell})
    default = make_config({"algorithm": "vflhlp", "label_owner": ACTIVE}).beta
    head = [f"**{b:g}**" if b == default else f"{b:g}" for b in betas]
    out = ["| setting | aligned | beta " + " | ".join(head) + " |", "|---|---|" + "---|" * len(betas)]
    for (setting, aligned), cell in sorted(val.items()):
        out.append(f"| {setting} | {aligned} | " + " | ".join(f"{cell[b]:.3f}" for b in betas) + " |")
    means = {b: np.mean([cell[b] for cell in val.values()]) for b in betas}
    best = max(means, key=means.get)
    out.append(
        "| **mean** | | " + " | ".join(f"**{means[b]:.3f}**" if b == best else f"{means[b]:.3f}" for b in betas) + " |"
    )
    return "\n".join(out)


def summary_table(records: list[dict], parties: int = 2) -> str:
    """docs/benchmarks.md: test AUC medians only, K = `parties`."""
    groups = {key: by for key, by in _groups(records).items() if key[0].endswith(f":{parties}")}
    columns = [m for m in METHODS if any(m in g for g in groups.values())]
    out = ["| | N | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for (setting, aligned), by_method in sorted(groups.items()):
        name = setting.split(":")[0].replace("_", " ").replace("adult", "Adult")
        out.append(
            f"| {name} | {aligned} | "
            + " | ".join(
                f"{np.median([test_metric(r) for r in by_method[m]]):.3f}" if by_method.get(m) else "" for m in columns
            )
            + " |"
        )
    return "\n".join(out)


def tables(records: list[dict]) -> str:
    """The report's tables: beta selection, test AUC, credit default's communication (K = 2), the K = 2 medians."""
    return "\n\n".join(
        t for t in (beta_table(records), auc_table(records), communication_table(records), summary_table(records)) if t
    )


def select_beta(spec: Suite, out: Path, data_dir: Path) -> None:
    """VFLHLP's validation AUC per beta on a split seed no benchmark uses; the test AUC is recorded, never read."""
    for setting in spec.datasets:
        for aligned in spec.settings["aligned"]:
            for beta in BETAS:
                record = run_one("VFLHLP", setting, aligned, SELECTION_SEED, {"beta": beta}, data_dir, SPLITS)
                append_jsonl(out, {**record, "beta_selection": beta})
                val = next(v for k, v in record["metrics"].items() if k.startswith("val_"))
                print(f"beta {beta}: {setting} {aligned} split seed {SELECTION_SEED}: val {val:.4f}", flush=True)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (setting, N, seed, method) not yet in `out` (FedHSSL with 2 parties only), appended as each ends."""
    limit_threads()
    if spec.settings["select_beta"]:
        return select_beta(spec, out, data_dir)
    done = {(r["setting"], r["aligned"], r["seed"], r["method"]) for r in read_jsonl(out) if "beta_selection" not in r}
    overrides = dict(spec.settings["job"])
    for setting in spec.datasets:
        for aligned in spec.settings["aligned"]:
            for seed in spec.seeds:
                for method in spec.methods:
                    if (setting, aligned, seed, method) in done or (method == "FedHSSL" and not setting.endswith(":2")):
                        continue
                    own = overrides if METHODS[method]["algorithm"] == "vflhlp" else {}
                    record = run_one(method, setting, aligned, seed, own, data_dir, SPLITS)
                    append_jsonl(out, record)
                    print(
                        f"{setting} {aligned} seed {seed} {method}: test {test_metric(record):.4f}, "
                        f"{record['wall_s']} s",
                        flush=True,
                    )


@table("vflhlp")
def committed_tables() -> str:
    return tables(read_jsonl(RESULTS))


suite(
    Suite(
        name="vflhlp",
        about="VFLHLP against its ablations, the active party alone and the other algorithms (VFLHLP_REPORT.md)",
        runner=run,
        datasets=tuple(SETTINGS),
        methods=tuple(METHODS),
        seeds=(0, 1, 2),
        settings={
            "aligned": tuple(ALIGNED),  # N, the aligned labeled training rows
            "job": {},  # config overrides for the VFLHLP runs
            "select_beta": False,  # only choose beta on validation AUC (split seed 9)
        },
        records="vflhlp.jsonl",
    )
)
