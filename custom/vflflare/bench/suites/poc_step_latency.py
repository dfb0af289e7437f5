"""Per-batch split-NN step latency in a real NVFlare POC (issue 10, item 10), for one or more code trees
side by side: runs alternate between the trees, so changing machine load falls on each alike.

Each run is `poc/run.sh` on a vanilla job (2 sites, batch 32, `split_epochs` epochs without early
stop); the job's processes import vflflare from the tree given (PYTHONPATH), so a git worktree of an
older commit measures that commit. The ledger times each step's round trip to all sites
(`step_latency` in vflflare_results.json).

    vflflare split --dataset credit_default --data-dir "$VFLFLARE_DATA_DIR" --sites 2 --overlap 1000 --seed 0 \\
        --out /tmp/scale/credit
    git worktree add /tmp/wt_before <commit>
    vflflare bench run poc_step_latency --set session=mine --set data_root=/tmp/scale/credit --set reps=3 \\
        --set trees='["before=/tmp/wt_before/custom", "after=custom"]'
    vflflare bench run poc_step_latency --committed --set session=adhoc --set data_root=/tmp/scale/credit \\
        --set trees='["default-routing=custom --no-adhoc", "adhoc=custom"]'

Records are appended (with --committed, to benchmarks/results/poc_step_latency.jsonl), tagged with the
session; each committed session is one table (SCALE_REPORT's `<!-- table poc_step_latency/SESSION -->`).
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from vflflare.bench.paths import COMMITTED, REPO
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import register

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


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """`reps` rounds over the trees, each tree's run in turn; every run appended to `out` as it ends."""
    settings = spec.settings
    if not (settings["session"] and settings["data_root"] and settings["trees"]):
        raise ValueError("set session, data_root (a `vflflare split` folder) and trees to run")
    trees = {}
    for tree_spec in settings["trees"]:
        name, rest = tree_spec.split("=", 1)
        folder, *options = shlex.split(rest)
        trees[name] = (Path(folder).resolve(), options)
    work = Path(settings["work"])
    epochs = settings["epochs"]
    job = work / "jobs" / "vanilla_poc"
    subprocess.run(
        [
            str(Path(sys.executable).with_name("vflflare")), "jobs", "--out", str(work / "jobs"), "--name",
            "vanilla_poc", "--algorithm", "vanilla", "--set", f"split_epochs={epochs}", "--set",
            f"split_patience={epochs}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    rows: list[dict] = []
    for rep in range(settings["reps"]):
        for index, (name, (tree, options)) in enumerate(trees.items()):
            port = settings["port"] + len(rows)  # a stopped POC's port can stay busy for a while
            workspace = work / f"ws_{index}_{rep}"  # a tree's name is free text: no path from it
            row = {
                "session": settings["session"],
                "tree": name,
                "options": options,
                "rep": rep,
                "epochs": epochs,
                **run_once(tree, options, job, settings["data_root"], workspace, port),
                "env": environment_record(),
            }
            print(json.dumps(row), flush=True)
            append_jsonl(out, row)
            rows.append(row)
    print(table(rows, settings["session"]))


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


suite(
    Suite(
        name="poc_step_latency",
        about="per-batch split-NN step latency in a real NVFlare POC, code trees side by side (SCALE_REPORT.md)",
        runner=run,
        datasets=("credit_default",),
        methods=("vanilla",),
        seeds=(0,),
        settings={
            "session": None,  # the name the runs are recorded under: one table per session
            "data_root": None,  # a `vflflare split` folder
            "trees": (),  # "NAME=DIR [poc/run.sh options]": the folder holding the vflflare package to measure
            "reps": 3,
            "epochs": 10,
            "work": "/tmp/vflflare_step_latency",
            "port": 8123,  # the first run's; each run takes the next
        },
        records="poc_step_latency.jsonl",
        needs_data=lambda spec: False,  # it runs on the split folder its data_root setting names
    )
)
for _session in dict.fromkeys(r["session"] for r in read_jsonl(RESULTS)):
    register(f"poc_step_latency/{_session}", lambda s=_session: table(read_jsonl(RESULTS), s))
