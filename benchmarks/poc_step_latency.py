"""Per-batch split-NN step latency in a real NVFlare POC (issue 10, item 10), for one or more code trees
side by side: runs alternate between the trees, so changing machine load falls on each alike.

Each run is `poc/run.sh` on a vanilla job (2 sites, batch 32, `split_epochs` epochs without early
stop); the job's processes import vflflare from the tree given (PYTHONPATH), so a git worktree of an
older commit measures that commit. The ledger times each step's round trip to all sites
(`step_latency` in vflflare_results.json).

    vflflare split --dataset credit_default --data-dir ../shared/data --sites 2 --overlap 1000 --seed 0 \\
        --out /tmp/scale/credit
    git worktree add /tmp/wt_before <commit>
    python benchmarks/poc_step_latency.py --session mine --data-root /tmp/scale/credit --reps 3 \\
        --tree before=/tmp/wt_before/custom --tree after=custom
    python benchmarks/poc_step_latency.py --session adhoc --data-root /tmp/scale/credit --reps 3 \\
        --tree "default-routing=custom --no-adhoc" --tree adhoc=custom

Records are appended to benchmarks/results/poc_step_latency.jsonl, tagged with --session; `--table SESSION`
prints that comparison's table (SCALE_REPORT's `<!-- table poc_step_latency/SESSION -->`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from vflflare.bench.paths import COMMITTED
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl

REPO = Path(__file__).resolve().parents[1]
RESULTS = COMMITTED / "poc_step_latency.jsonl"


def run_once(tree: Path, options: list[str], job: Path, data_root: str, workspace: Path, port: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    load = os.getloadavg()[0]
    proc = subprocess.run(
        [
            str(REPO / "poc" / "run.sh"),
            str(job),
            "--sites",
            "2",
            "--data-root",
            data_root,
            "--workspace",
            str(workspace),
            "--port",
            str(port),
            *options,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    found = sorted(workspace.rglob("vflflare_results.json"), key=lambda p: p.stat().st_mtime)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"POC run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    results = json.loads(found[-1].read_text())
    phases = {p["name"]: p["wall_s"] for p in results["phases"]}
    return {
        "load_1min": round(load, 2),
        **results["step_latency"],
        "split_training_s": phases["split_training"],
        "metrics": results["metrics"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--session", help="the name these runs are recorded under")
    parser.add_argument("--table", metavar="SESSION", help="print a recorded session's table, run nothing")
    parser.add_argument("--data-root")
    parser.add_argument(
        "--tree",
        action="append",
        metavar="NAME=DIR [OPTIONS]",
        help="a code tree to measure: the folder holding the vflflare package, then any "
        "poc/run.sh options for its runs (e.g. 'provisioned=custom --no-adhoc')",
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--out", default="/tmp/vflflare_step_latency")
    parser.add_argument("--port", type=int, default=8123, help="the first run's; each run takes the next")
    args = parser.parse_args(argv)
    if args.table:
        print(table(read_jsonl(RESULTS), args.table))
        return 0
    if not (args.session and args.data_root and args.tree):
        parser.error("--session, --data-root and --tree are needed to run")
    trees = {}
    for spec in args.tree:
        name, rest = spec.split("=", 1)
        folder, *options = shlex.split(rest)
        trees[name] = (Path(folder).resolve(), options)
    out = Path(args.out)
    job = out / "jobs" / "vanilla_poc"
    subprocess.run(
        [
            str(Path(sys.executable).with_name("vflflare")),
            "jobs",
            "--out",
            str(out / "jobs"),
            "--name",
            "vanilla_poc",
            "--algorithm",
            "vanilla",
            "--set",
            f"split_epochs={args.epochs}",
            "--set",
            f"split_patience={args.epochs}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    rows: list[dict] = []
    for rep in range(args.reps):
        for index, (name, (tree, options)) in enumerate(trees.items()):
            port = args.port + len(rows)  # a stopped POC's port can stay busy for a while
            workspace = out / f"ws_{index}_{rep}"  # a tree's name is free text: no path from it
            row = {
                "session": args.session,
                "tree": name,
                "options": options,
                "rep": rep,
                "epochs": args.epochs,
                **run_once(tree, options, job, args.data_root, workspace, port),
                "env": environment_record(),
            }
            print(json.dumps(row), flush=True)
            append_jsonl(RESULTS, row)
            rows.append(row)
    print(table(rows, args.session))
    return 0


def table(records: list[dict], session: str) -> str:
    rows = [r for r in records if r["session"] == session]
    out = [
        "| tree | runs | steps/run | median ms (each run) | p90 ms | split_training s | test_auc |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["tree"] for r in rows):
        mine = [r for r in rows if r["tree"] == name]
        medians = ", ".join(f"{r['median_ms']:.1f}" for r in mine)
        aucs = ", ".join(sorted({f"{r['metrics']['test_auc']:.4f}" for r in mine}))
        out.append(
            f"| {name} | {len(mine)} | {mine[0]['steps']} | {statistics.median(r['median_ms'] for r in mine):.1f} "
            f"({medians}) | {statistics.median(r['p90_ms'] for r in mine):.1f} | "
            f"{statistics.median(r['split_training_s'] for r in mine):.2f} | {aucs} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
