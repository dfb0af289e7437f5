"""Before/after check of a refactor: every algorithm on credit default (2 sites, N_o 1000), seeds 0-2,
in process and in the NVFlare simulator. It talks to vflflare only through its command line (`split`,
`inprocess`, `jobs`, `simulate`), so the same script runs against the code before and after a change:

    git worktree add /tmp/vfl_before <old commit>; git worktree add /tmp/vfl_after <new commit>
    PYTHONPATH=/tmp/vfl_before/custom .venv/bin/python benchmarks/refactor_parity.py --out /tmp/parity/before.jsonl
    PYTHONPATH=/tmp/vfl_after/custom .venv/bin/python benchmarks/refactor_parity.py --out /tmp/parity/after.jsonl
    .venv/bin/python benchmarks/refactor_parity.py --compare /tmp/parity/before.jsonl /tmp/parity/after.jsonl

(PYTHONPATH picks the code under test; every vflflare and NVFlare process the script starts inherits it.
The data comes from ../shared/data, or VFLFLARE_DATA_DIR.)

Each record keeps the metrics and, per site, uploads, downloads, payload bytes and wire bytes. The
comparison prints one row per (method, seed, mode) and flags any number that moved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("VFLFLARE_DATA_DIR", REPO.parent / "shared" / "data"))
SPLITS = Path("/tmp/vflflare-bench/splits")

# method -> (algorithm, --set overrides); fedbcd with the paper's Q = 5
METHODS: dict[str, tuple[str, dict]] = {
    "vanilla": ("vanilla", {}),
    "fedbcd": ("fedbcd", {"local_steps": 5}),
    "oneshot": ("oneshot", {}),
    "fewshot": ("fewshot", {}),
    "fewshot+finetune": ("fewshot", {"finetune_epochs": 20}),
    "ssvfl_i": ("ssvfl_i", {}),
    "ssvfl_c": ("ssvfl_c", {}),
    "fedhssl": ("fedhssl", {}),
    "vflhlp": ("vflhlp", {"label_owner": "site-1"}),
}
# run only when named (--methods): a silo space (CFL on credit default's columns) and an image split (one-shot on
# MNIST halves, 800 training and 200 test images, N_o 200)
EXTRA_METHODS: dict[str, tuple[str, dict]] = {"cfl": ("cfl", {}), "oneshot_mnist": ("oneshot", {})}
# methods whose split differs from the default one (labels at the server): extra `vflflare split` arguments
SPLIT_ARGS: dict[str, tuple[str, ...]] = {
    "vflhlp": ("--label-owner", "site-1", "--active-site-labels"),
    "cfl": ("--silo-space",),
    "oneshot_mnist": ("--dataset", "mnist", "--overlap", "200", "--train-rows", "800", "--test-rows", "200"),
}
MODES = ("inprocess", "simulator")


def vflflare(*args: str, env: dict | None = None) -> None:
    subprocess.run([sys.executable, "-m", "vflflare.cli", *args], check=True, env=env, stdout=subprocess.DEVNULL)


def split(seed: int, extra: tuple[str, ...] = ()) -> Path:
    out = SPLITS / ("_".join([f"credit_default_n1000_s{seed}", *(a.strip("-") for a in extra)]))
    if not (out / "manifest.json").exists():
        dataset = () if "--dataset" in extra else ("--dataset", "credit_default")
        overlap = () if "--overlap" in extra or "--silo-space" in extra else ("--overlap", "1000")
        args = ("--data-dir", str(DATA_DIR), "--sites", "2", "--seed", str(seed), "--out", str(out))
        vflflare("split", *dataset, *overlap, *args, *extra)
    return out


def sets(overrides: dict) -> list[str]:
    return [arg for key, value in overrides.items() for arg in ("--set", f"{key}={json.dumps(value)}")]


def run(method: str, seed: int, mode: str, work: Path) -> dict:
    algorithm, overrides = {**METHODS, **EXTRA_METHODS}[method]
    root = split(seed, SPLIT_ARGS.get(method, ()))
    overrides = {**overrides, "seed": seed}
    out = work / f"{method}_{seed}_{mode}"
    out.mkdir(parents=True)
    if mode == "inprocess":
        result = out / "result.json"
        vflflare(
            "inprocess", "--algorithm", algorithm, "--data-root", str(root), "--json", str(result), *sets(overrides)
        )
    else:
        name = method.replace("+", "_")
        vflflare("jobs", "--out", str(out / "jobs"), "--name", name, "--algorithm", algorithm, *sets(overrides))
        vflflare(
            "simulate", str(out / "jobs" / name), "-w", str(out / "ws"), "-n", "2", "-t", "2", "--data-root", str(root)
        )
        result = next((out / "ws").rglob("vflflare_results.json"))
    record = json.loads(result.read_text())
    if "error" in record:
        raise RuntimeError(f"{method} seed {seed} {mode}: {record['error']}")
    comm = record["communication"]
    return {
        "method": method,
        "seed": seed,
        "mode": mode,
        "metrics": record["metrics"],
        "per_site": comm["per_site"],
        "per_phase": {p: row for p, row in comm["per_phase"].items()},
        "wall_s": record.get("wall_s"),
    }


def test_score(record: dict) -> float:
    """Test AUC, or a multi-class run's test accuracy (MNIST), or CFL's first silo's test accuracy."""
    metrics = record["metrics"]
    return metrics.get("test_auc", metrics.get("test_accuracy", next(v for k, v in metrics.items() if "test" in k)))


def key(record: dict) -> tuple:
    return record["method"], record["seed"], record["mode"]


def compare(before_path: Path, after_path: Path) -> int:
    read = lambda p: {key(r): r for r in map(json.loads, Path(p).read_text().splitlines()) if r}  # noqa: E731
    before, after = read(before_path), read(after_path)
    print(
        "| method | seed | mode | test AUC before | test AUC after | uploads/downloads per site | payload bytes "
        "per site | wire bytes per site (before → after) | same |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    moved = 0
    order = [*METHODS, *EXTRA_METHODS]
    for k in sorted(before, key=lambda k: (order.index(k[0]), k[1], k[2])):
        b, a = before[k], after.get(k)
        if a is None:
            print(f"| {' | '.join(map(str, k))} | {test_score(b):.4f} | missing | | | | no |")
            moved += 1
            continue
        counts = lambda r: {s: (v["uploads"], v["downloads"]) for s, v in r["per_site"].items()}  # noqa: E731
        payload = lambda r: {s: v["payload_bytes"] for s, v in r["per_site"].items()}  # noqa: E731
        wire = lambda r: "/".join(str(v["wire_bytes"]) for v in r["per_site"].values())  # noqa: E731
        same = b["metrics"] == a["metrics"] and counts(b) == counts(a) and payload(b) == payload(a)
        moved += not same
        site_counts = "; ".join(f"{u}/{d}" for u, d in counts(a).values())
        site_payload = "/".join(str(v) for v in payload(a).values())
        print(
            f"| {k[0]} | {k[1]} | {k[2]} | {test_score(b):.4f} | {test_score(a):.4f} | "
            f"{site_counts} | {site_payload} | {wire(b)} → {wire(a)} | {'yes' if same else '**no**'} |"
        )
    print(f"\n{len(before)} runs compared, {moved} differ in metrics, counts or payload bytes")
    return 1 if moved else 0


def changes(before_path: Path, after_path: Path) -> str:
    """For a change meant to move numbers: per method, the test AUC difference after - before per seed and
    its median, and whether the site's message counts stayed (a different early-stopping epoch moves them)."""
    read = lambda p: {key(r): r for r in map(json.loads, Path(p).read_text().splitlines()) if r}  # noqa: E731
    before, after = read(before_path), read(after_path)
    lines = ["| method | median Δ test AUC | Δ per seed | uploads/downloads per site |", "|---|---|---|---|"]
    for method in METHODS:
        keys = sorted(k for k in before if k[0] == method and k in after)
        if not keys:
            continue
        deltas = [after[k]["metrics"]["test_auc"] - before[k]["metrics"]["test_auc"] for k in keys]
        first = lambda r: next(iter(r["per_site"].values()))  # noqa: E731
        counts = [
            (first(before[k])["uploads"], first(before[k])["downloads"], first(after[k])["downloads"]) for k in keys
        ]
        if all(
            first(before[k])["uploads"] == first(after[k])["uploads"] and b == a for k, (_, b, a) in zip(keys, counts)
        ):
            moved = f"same ({counts[0][0]} up, {counts[0][1]} down)"
        else:
            moved = "differ: " + ", ".join(f"{b} → {a}" for _, b, a in counts) + " downloads"
        lines.append(
            f"| {method} | {statistics.median(deltas):+.4f} | {', '.join(f'{d:+.4f}' for d in deltas)} | {moved} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="JSON lines; runs already in it are skipped")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=[*METHODS, *EXTRA_METHODS])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    done = {key(json.loads(line)) for line in args.out.read_text().splitlines()} if args.out.exists() else set()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vflflare-parity-") as work:
        for method in args.methods:
            for seed in args.seeds:
                for mode in args.modes:
                    if (method, seed, mode) in done:
                        continue
                    record = run(method, seed, mode, Path(work))
                    print(f"{method} seed {seed} {mode}: {record['metrics']}", flush=True)
                    with open(args.out, "a") as handle:
                        handle.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
