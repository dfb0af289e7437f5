"""Peak memory of a VFL run at scale (issue 10, item 10), measured two ways on a split written by
`vflflare split`:

- `tree`: `vflflare inprocess` as a child process (coordinator and sites in one process, as the
  in-process driver runs them). Reported: the peak RSS of the process tree, sampled with psutil, and
  the child's own peak (getrusage's ru_maxrss, exact).
- `sites`: the same protocol and numbers, but each site's SiteRuntime lives in its own process and
  the coordinator talks to it through a pipe, as NVFlare's site processes would. Each site reports
  its exact peak RSS (ru_maxrss) and its RSS and peak after every task, so the phase that sets a
  site's peak is visible. The metrics must equal the `tree` run's: only the process boundary differs.

    vflflare split --dataset synthetic --synthetic-rows 1650000 --synthetic-features 100 --sites 2 \
        --overlap 10000 --seed 0 --out /tmp/scale/s1m
    vflflare bench run scale_memory --methods tree --set data_root=/tmp/scale/s1m --set job='{"ssl_epochs": 1}'
    vflflare bench run scale_memory --methods sites --set data_root=/tmp/scale/s1m --set job='{"ssl_epochs": 1}'

SCALE_REPORT's tables come from the records committed in benchmarks/results/scale_memory.jsonl (one line a
run, with the code's commit and environment): `tables(records)`.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from vflflare.bench.paths import COMMITTED
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import table

MB = 2**20
POLL_S = 0.05


# ---------------------------------------------------------------- tree: one in-process run
def tree_peak(data_root: str, algorithm: str, settings: list[str], sites: int) -> dict[str, Any]:
    """Run `vflflare inprocess` and sample the RSS of its process tree until it exits."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        command = [
            str(Path(sys.executable).with_name("vflflare")),
            "inprocess",
            "--algorithm",
            algorithm,
            "--sites",
            str(sites),
            "--data-root",
            data_root,
            "--json",
            str(out),
        ]
        for setting in settings:
            command += ["--set", setting]
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        peak = _sample_tree(child)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(command)} failed with exit code {os.waitstatus_to_exitcode(status)}")
        results = json.loads(out.read_text())
    return {
        "mode": "tree",
        "command": " ".join(["vflflare", *command[1:-2]]),
        "wall_s": round(wall, 1),
        "tree_peak_mb": round(peak / MB),
        "process_peak_mb": round(usage.ru_maxrss * 1024 / MB),
        "metrics": results["metrics"],
        "rows": results["rows"],
    }


def _sample_tree(child: subprocess.Popen) -> int:
    """Largest sum of RSS over the child and its descendants, polled until the child exits. The wait
    itself is os.wait4's, so the child's exact ru_maxrss is still there to read afterwards."""
    process, peak = psutil.Process(child.pid), 0
    while True:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return peak
            members = [process, *process.children(recursive=True)]
            total = 0
            for member in members:
                try:
                    total += member.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
        except psutil.NoSuchProcess:
            return peak
        peak = max(peak, total)
        time.sleep(POLL_S)


# ---------------------------------------------------------------- sites: one process per site
def _site_main(site: str, data_root: str, pipe) -> None:  # noqa: ANN001 - a multiprocessing Connection
    """A site process: answer (task, payload) requests with (reply, wire_dtype, error) until None arrives,
    then send the memory log: the RSS and peak RSS after every task."""
    from vflflare.protocol.site_runtime import SiteRuntime

    runtime = SiteRuntime(site, data_root)
    log = [{"task": "start", "rss_mb": _rss_mb(), "peak_mb": _peak_mb()}]
    while (request := pipe.recv()) is not None:
        task, payload = request
        try:
            pipe.send((runtime.handle(task, payload), runtime.wire_dtype, None))
        except Exception as error:  # noqa: BLE001 - handed to the coordinator, which raises it
            pipe.send((None, runtime.wire_dtype, error))
        log.append({"task": task, "rss_mb": _rss_mb(), "peak_mb": _peak_mb()})
    pipe.send(log)


class SiteProcess:
    """What InProcessTransport needs of a SiteRuntime (`handle`, `wire_dtype`), answered by a site process."""

    def __init__(self, site: str, data_root: str, context: mp.context.BaseContext) -> None:
        self.pipe, child_end = context.Pipe()
        self.process = context.Process(target=_site_main, args=(site, data_root, child_end), name=site)
        self.process.start()
        self.wire_dtype = "float32"

    def handle(self, task: str, payload: dict) -> dict:
        self.pipe.send((task, payload))
        reply, self.wire_dtype, error = self.pipe.recv()
        if error is not None:
            raise error
        return reply

    def close(self) -> list[dict]:
        self.pipe.send(None)
        log = self.pipe.recv()
        self.process.join()
        return log


def sites_peak(data_root: str, algorithm: str, settings: dict[str, Any], sites: int) -> dict[str, Any]:
    from vflflare.config import SERVER
    from vflflare.data.loading import load_label_tables
    from vflflare.protocol.inprocess import InProcessTransport
    from vflflare.protocol.runner import run_algorithm
    from vflflare.protocol.views import job_data_request
    from vflflare.registry import make_config
    from vflflare.torch_runtime import prepare_torch
    from vflflare.tracking import LogTracker

    cfg = make_config({"algorithm": algorithm, **settings})
    names = [f"site-{i + 1}" for i in range(sites)]
    context = mp.get_context("spawn")  # fresh interpreters: a site's peak is its own, not a fork of ours
    processes = {site: SiteProcess(site, data_root, context) for site in names}
    started = time.perf_counter()
    try:
        prepare_torch(cfg.num_threads)
        net = InProcessTransport(processes, cfg.wire_dtype)
        labels = lambda: load_label_tables(SERVER, job_data_request(names, data_root, cfg))  # noqa: E731
        results = run_algorithm(net, cfg, labels, LogTracker("vflflare.server"))
    finally:
        logs = {site: process.close() for site, process in processes.items()}
    per_site = {
        site: {
            "peak_mb": log[-1]["peak_mb"],
            "after_start_mb": log[0]["rss_mb"],
            "peak_set_by": _peak_task(log),
            "log": log,
        }
        for site, log in logs.items()
    }
    return {
        "mode": "sites",
        "wall_s": round(time.perf_counter() - started, 1),
        "coordinator_peak_mb": _peak_mb(),
        "sites": per_site,
        "metrics": results["metrics"],
        "rows": results["rows"],
    }


def _peak_task(log: list[dict]) -> str:
    """The first task after which the site's peak RSS reached its final value."""
    final = log[-1]["peak_mb"]
    return next(entry["task"] for entry in log if entry["peak_mb"] == final)


def _rss_mb() -> int:
    return round(psutil.Process().memory_info().rss / MB)


def _peak_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB)  # ru_maxrss is in KiB on Linux


RESULTS = COMMITTED / "scale_memory.jsonl"
SPLITS = {"s1m": "995,000 rows x 50 per site", "s100k": "99,500 rows x 50 per site"}  # the docstring's splits


def tables(records: list[dict]) -> str:
    """Per split, from its newest records: each site's peak and per-task log (`sites`), the coordinator's peak
    and the in-process tree's (`tree`), whether both modes gave the same metrics, and the wall times."""
    out = []
    order = list(SPLITS)
    for root in sorted(
        dict.fromkeys(r["data_root"] for r in records),
        key=lambda root: order.index(Path(root).name) if Path(root).name in order else len(order),
    ):
        sites = next(r for r in reversed(records) if r["data_root"] == root and r["mode"] == "sites")  # the newest
        tree = next(r for r in reversed(records) if r["data_root"] == root and r["mode"] == "tree")
        info = sites["sites"]
        first = next(iter(info))
        log = ", ".join(
            f"{e['task']} {e['rss_mb']}" + (f"/{e['peak_mb']}" if e["peak_mb"] > e["rss_mb"] else "")
            for e in info[first]["log"]
        )
        same = "the same in both modes" if sites["metrics"] == tree["metrics"] else "NOT the same in both modes"
        out.append(
            "\n".join(
                [
                    f"| {SPLITS.get(Path(root).name, root)} | `{sites['env']['commit'][:7]}` |",
                    "|---|---|",
                    f"| {' / '.join(info)} peak (`sites`) | "
                    f"**{' / '.join(str(i['peak_mb']) for i in info.values())}** |",
                    f"| {first} per-task log (RSS after the task / peak so far) | {log} |",
                    f"| task that sets the peak | {info[first]['peak_set_by']} |",
                    f"| coordinator peak (`sites`) | {sites['coordinator_peak_mb']} |",
                    f"| in-process tree peak (`tree`) | **{tree['tree_peak_mb']}** |",
                    f"| metrics ({', '.join(sites['metrics'])}) | "
                    f"{', '.join(f'{v:.6f}' for v in sites['metrics'].values())}; {same} |",
                    f"| wall (`sites` / `tree`) | {sites['wall_s']:.0f} s / {tree['wall_s']:.0f} s |",
                ]
            )
        )
    return "\n\n".join(out)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Each measurement (`tree`, `sites`) of one run on the split at `data_root`; a record each in `out`."""
    settings = spec.settings
    if not settings["data_root"]:
        raise ValueError("set data_root: a folder written by `vflflare split`")
    job = dict(settings["job"])
    # as `--set KEY=VALUE` arguments: the tree run passes them on, and the record keeps them so
    as_set = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in job.items()]
    for mode in spec.methods:
        if mode == "tree":
            result = tree_peak(settings["data_root"], settings["algorithm"], as_set, settings["sites"])
        else:
            result = sites_peak(settings["data_root"], settings["algorithm"], job, settings["sites"])
        result.update(
            data_root=settings["data_root"], algorithm=settings["algorithm"], settings=as_set, env=environment_record()
        )
        brief = {k: v for k, v in result.items() if k != "sites"}
        if "sites" in result:
            brief["sites"] = {s: {k: v for k, v in info.items() if k != "log"} for s, info in result["sites"].items()}
            for site, info in result["sites"].items():
                print(f"{site}: " + ", ".join(f"{e['task']} {e['rss_mb']}/{e['peak_mb']}" for e in info["log"]))
        print(json.dumps(brief, indent=2))
        append_jsonl(out, result)


@table("scale_memory")
def committed_tables() -> str:
    return tables(read_jsonl(RESULTS))


suite(
    Suite(
        name="scale_memory",
        about="peak memory of a VFL run at scale: the process tree, and each site in its own process",
        runner=run,
        datasets=("synthetic",),
        methods=("tree", "sites"),  # the two ways of measuring
        seeds=(0,),
        settings={
            "data_root": None,  # a folder written by `vflflare split`
            "algorithm": "oneshot",
            "sites": 2,
            "job": {},  # job settings
        },
        records="scale_memory.jsonl",
    )
)
