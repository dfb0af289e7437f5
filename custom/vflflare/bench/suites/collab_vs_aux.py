"""One split-NN step (vanilla VFL, credit default, batch 32): vflflare's aux-message path against
NVFlare 2.9's Collab API, side by side, in the NVFlare simulator and in a local POC, K = 2 and 4.

Paths (each one a whole NVFlare job on the same split, `vflflare split --dataset credit_default
--overlap 1000 --seed 0 --sites K`):
- aux:          vflflare's own vanilla job (`vflflare jobs --algorithm vanilla --set split_epochs=E
                --set split_patience=E`); per-step latency from its vflflare_results.json `step_latency`.
- collab:       vflflare.bench.collab_split (CollabRecipe): the server calls every site's published
                `step(grad, rows)` in parallel with numpy arrays as arguments and result.
- collab_bytes: the same job, arrays passed as plain bytes (what vflflare's aux path does with its
                msgpack codec); shows what the default array transport (fobs download transactions) costs.
Both do E epochs of 800 aligned training rows = 25 timed round trips each (E = 21: 525 steps; the
collab job also reports the 500 after the first 25 as warm-up). Runs alternate aux, collab,
collab_bytes, aux, ... so machine load hits every path alike. The POC is started once per K and every
job is submitted to it in turn (vflflare.poc.runner's PocRun: private NVFLARE_POC_WORKSPACE and HOME; started
with `nvflare poc start --no-wait` and ready once the server log shows every site, see start_poc).

Same numbers: every collab run's per-step losses are compared with an in-process loop of the same
model and schedule (collab_split.split_step.run_reference); vflflare's job trains on another row
order, so for it the validation/test AUC are recorded instead.

    vflflare bench run collab_vs_aux --committed                     # K = 2 and 4, 3 simulator and 2 POC reps
    vflflare bench run collab_vs_aux --committed --set ks='[4]' --set poc_reps=1   # as in COLLAB_REPORT.md
    vflflare bench tables                    # COLLAB_REPORT.md's table from results/collab_vs_aux.jsonl

A run resumes: every (setting, K, path, rep) that already has a row without error in its records is skipped
(--set fresh=true starts over), and the closing table covers the whole file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

import vflflare
from vflflare.bench.collab_split.split_step import latency, run_reference
from vflflare.bench.paths import COMMITTED
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.splits import prepare_split as prepare_credit_split
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import register
from vflflare.jobs import write_job
from vflflare.poc.processes import become_subreaper
from vflflare.poc.runner import SERVER, PocRun, SetupError
from vflflare.simulation import simulate
from vflflare.staging import stage_job

RESULTS = COMMITTED / "collab_vs_aux.jsonl"
PATHS = ("aux", "collab", "collab_bytes")
SEED, OVERLAP = 0, 1000
AUX_RESULTS, COLLAB_RESULTS = "vflflare_results.json", "collab_split_results.json"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def prepare_split(k: int, work: Path, data_dir: Path) -> Path:
    """`vflflare split --dataset credit_default --sites K --overlap 1000 --seed 0`, once per K."""
    return prepare_credit_split(data_dir, OVERLAP, SEED, work, parties=k)


def _env(**extra: str) -> dict:
    """This process's environment, with the code tree of the vflflare running here first on PYTHONPATH: the
    simulator and POC processes run the same code."""
    env = dict(os.environ)
    code = str(Path(vflflare.__file__).resolve().parents[1])
    paths = [code] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(extra)
    return env


def make_jobs(k: int, epochs: int, work: Path) -> dict[str, Path]:
    # here, not at the top: NVFlare's Collab API takes half a second to import, and every `vflflare bench
    # tables` loads this module
    from vflflare.bench.collab_split.app import ARRAYS, BYTES
    from vflflare.bench.collab_split.job import export_job

    jobs = work / "jobs"
    aux = write_job(
        jobs,
        f"aux_vanilla_k{k}",
        {"algorithm": "vanilla", "seed": SEED, "split_epochs": epochs, "split_patience": epochs},
        min_sites=k,
    )
    return {
        "aux": stage_job(aux, work / "staged"),  # vflflare in app/custom, as poc/run.sh submits it
        "collab": export_job(jobs, k, epochs, payload=ARRAYS),
        "collab_bytes": export_job(jobs, k, epochs, payload=BYTES),
    }


def reference(k: int, root: Path, epochs: int) -> dict:

    ref = run_reference(str(root), [f"site-{i + 1}" for i in range(k)], epochs)
    return {"losses": ref["losses"], "epoch_loss": ref["epoch_loss"], "step_latency": latency(ref["step_s"])}


def record(setting: str, k: int, path: str, rep: int, result: dict, ref: dict, extra: dict) -> dict:
    row = {"setting": setting, "k": k, "path": path, "rep": rep, **extra}
    if "error" in result:
        row["error"] = result["error"]
        return row
    row["step_latency"] = result.get("step_latency", {})
    if path == "aux":
        row["metrics"] = result.get("metrics")
        row["split_epochs"] = (result.get("training") or {}).get("split_epochs")
        row["job_wall_s"] = result.get("wall_s")
        row["split_training_s"] = sum(p["wall_s"] for p in result.get("phases", []) if p["name"] == "split_training")
    else:
        losses = result["losses"]
        row["step_latency_after_warmup"] = result.get("step_latency_after_warmup")
        row["epoch_loss_first_last"] = [result["epoch_loss"][0], result["epoch_loss"][-1]]
        row["max_abs_loss_diff_vs_inprocess"] = (
            max(abs(a - b) for a, b in zip(losses, ref["losses"])) if len(losses) == len(ref["losses"]) else None
        )
        row["training_s"] = result.get("training_s")
        row["job_wall_s"] = result.get("wall_s")
    return row


def run_sim(path: str, job: Path, k: int, root: Path, work: Path, rep: int, timeout: float) -> dict:
    workspace = work / "sim_ws" / f"{path}_k{k}_{rep}"
    shutil.rmtree(workspace, ignore_errors=True)
    start = time.perf_counter()
    if path == "aux":
        try:
            result = simulate(str(job), str(workspace), k, k, str(root), timeout=timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            result = {"error": f"{type(error).__name__}: {error}"}
    else:  # the same command vflflare.cli.simulate runs
        cmd = [
            sys.executable,
            "-m",
            "nvflare.cli",
            "simulator",
            str(job),
            "-w",
            str(workspace),
            "-n",
            str(k),
            "-t",
            str(k),
        ]
        with open(work / "sim_ws" / f"{path}_k{k}_{rep}.log", "w") as out:
            try:
                subprocess.run(cmd, env=_env(VFLFLARE_DATA_ROOT=str(root)), timeout=timeout, stdout=out, stderr=out)
            except subprocess.TimeoutExpired as error:
                log(f"timeout: {error}")
        found = sorted(workspace.rglob(COLLAB_RESULTS))
        result = json.loads(found[-1].read_text()) if found else {"error": f"no {COLLAB_RESULTS} under {workspace}"}
    command_s = time.perf_counter() - start
    shutil.rmtree(workspace, ignore_errors=True)
    return result | {"command_s": round(command_s, 2)}


def start_poc(poc, sites: list[str], timeout: float) -> None:
    """`nvflare poc start --no-wait`, then wait until the server's log shows every site registered.
    (On this loaded 2-core machine `nvflare poc start`'s own readiness check did not return, twice, for K=4;
    once seen: its admin session stayed connected with no reply after all four sites had registered.)"""
    poc.started = True
    poc.nvflare("poc", "start", "--no-wait", timeout=120, new_session=True)
    server_log = poc.prod / "server" / "log.txt"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = server_log.read_text(errors="replace") if server_log.is_file() else ""
        joined = {site for site in sites if f"New client {site}@" in text}
        if len(joined) == len(sites):
            time.sleep(5)  # let the admin server settle before the first submission
            poc.log(f"POC started: server and {len(sites)} sites registered (server log)")
            return
        time.sleep(2)
    raise SetupError(f"not every site registered with the POC server within {timeout:.0f} s ({server_log})")


def run_poc(
    k: int,
    root: Path,
    jobs: dict[str, Path],
    work: Path,
    reps: int,
    timeout: int,
    refs: dict,
    out: Path,
    done: set | None = None,
    start_timeout: int = 300,
) -> list[dict]:
    done = done or set()
    todo = [(rep, path) for rep in range(reps) for path in PATHS if ("poc", k, path, rep) not in done]
    if not todo:
        log(f"poc K={k}: all {reps} rep(s) already in {out.name}, skipped")
        return []

    args = SimpleNamespace(
        job=str(jobs["aux"]),
        sites=k,
        he=False,
        data_root=str(root),
        workspace=str(work / f"poc_k{k}"),
        port=None,
        timeout=timeout,
        start_timeout=start_timeout,
        stop_timeout=90,
        keep=False,
    )
    poc = PocRun(args)
    poc.env["PYTHONPATH"] = _env()["PYTHONPATH"]
    poc.work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        sites = poc.sites()
        poc.prepare(sites)
        poc.configure_data([SERVER] + sites)
        try:
            start_poc(poc, sites, start_timeout)
        except SetupError:  # keep the participants' logs: stop() removes the POC workspace
            kept = poc.work / "failed_start_logs"
            for log_file in poc.poc.rglob("log*.txt"):
                target = kept / log_file.relative_to(poc.poc)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(log_file, target)
            log(f"poc K={k}: start failed; participants' logs copied to {kept}")
            raise
        for rep, path in todo:
            start = time.perf_counter()
            try:
                job_id, status = poc.submit_and_wait(jobs[path])
                poc.collect(job_id)
            except SetupError as error:  # one failed submission is recorded; the next job still runs
                job_id, status = None, f"SetupError: {error}"[:2000]
            name = AUX_RESULTS if path == "aux" else COLLAB_RESULTS
            file = poc.results_root / job_id / SERVER / name if job_id else None
            result = (
                json.loads(file.read_text())
                if file and file.is_file()
                else {"error": f"job {job_id} {status}: no {name}"}
            )
            row = record(
                "poc",
                k,
                path,
                rep,
                result,
                refs[k],
                {"job_id": job_id, "status": status, "command_s": round(time.perf_counter() - start, 2)},
            )
            append_jsonl(out, row)
            rows.append(row)
            log(summary(row))
    finally:
        poc.stop()
    return rows


def summary(row: dict) -> str:
    if "error" in row:
        return f"{row['setting']} K={row['k']} {row['path']} rep {row['rep']}: ERROR {row['error']}"
    lat = row["step_latency"]
    more = ""
    if row["path"] != "aux":
        more = (
            f" after warm-up {row['step_latency_after_warmup']}, loss {row['epoch_loss_first_last']},"
            f" max |loss - in-process| {row['max_abs_loss_diff_vs_inprocess']}"
        )
    else:
        more = f" metrics {row.get('metrics')}"
    return f"{row['setting']} K={row['k']} {row['path']} rep {row['rep']}: {lat}{more}"


def table(rows: list[dict]) -> str:
    """Markdown: per (setting, K, path) the median over runs of each run's median and p90 step latency; the
    ratio of those medians to aux's; and the median over reps of the paired ratio (run r of a path against
    aux's run r, which ran next to it: the fairest comparison under changing machine load)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if "error" not in row:
            groups.setdefault((row["setting"], row["k"], row["path"]), []).append(row)
    lines = [
        "| setting | K | path | runs | steps/run | median ms | p90 ms | ratio to aux (medians) | paired ratio "
        "to aux (median over reps) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    order = {"sim": 0, "poc": 1}
    for key in sorted(groups, key=lambda g: (order.get(g[0], 9), g[1], PATHS.index(g[2]))):
        setting, k, path = key
        runs = groups[key]
        med = statistics.median(r["step_latency"]["median_ms"] for r in runs)
        p90 = statistics.median(r["step_latency"]["p90_ms"] for r in runs)
        steps = sorted({r["step_latency"]["steps"] for r in runs})
        aux = groups.get((setting, k, "aux"))
        if path == "aux":
            ratio = paired = "1"
        elif not aux:
            ratio = paired = "n/a"
        else:
            ratio = f"{med / statistics.median(r['step_latency']['median_ms'] for r in aux):.2f}"
            aux_by_rep = {r["rep"]: r["step_latency"]["median_ms"] for r in aux}
            pairs = [r["step_latency"]["median_ms"] / aux_by_rep[r["rep"]] for r in runs if r["rep"] in aux_by_rep]
            paired = f"{statistics.median(pairs):.2f} ({', '.join(f'{x:.2f}' for x in pairs)})" if pairs else "n/a"
        label = {"sim": "simulator", "poc": "POC"}.get(setting, setting)
        lines.append(
            f"| {label} | {k} | {path} | {len(runs)} | {'/'.join(map(str, steps))} | {med:.1f} | {p90:.1f} |"
            f" {ratio} | {paired} |"
        )
    return "\n".join(lines)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """Every (setting, K, path, rep) without a row free of error in `out`, simulator runs first, then one POC
    per K; the table of the whole file."""
    settings = spec.settings
    ks = list(settings["ks"])
    become_subreaper()  # POC processes that outlive their parents stay ours to stop
    signal.signal(signal.SIGTERM, _terminate)
    os.environ["PYTHONPATH"] = _env()["PYTHONPATH"]
    torch.set_num_threads(1)
    if settings["fresh"] and out.exists():
        out.unlink()
    work = Path(settings["work"])
    work.mkdir(parents=True, exist_ok=True)
    (work / "sim_ws").mkdir(exist_ok=True)
    roots = {k: prepare_split(k, work, data_dir) for k in ks}
    jobs = {k: make_jobs(k, settings["epochs"], work) for k in ks}
    refs = {}
    for k in ks:
        refs[k] = reference(k, roots[k], settings["epochs"])
        log(
            f"in-process reference K={k}: step {refs[k]['step_latency']}, epoch loss "
            f"{refs[k]['epoch_loss'][0]:.4f} -> {refs[k]['epoch_loss'][-1]:.4f}"
        )
    done = {(r["setting"], r["k"], r["path"], r["rep"]) for r in read_jsonl(out) if "error" not in r}
    if done:
        log(f"resuming: {len(done)} run(s) already in {out}")
    for k in ks:
        for rep in range(settings["sim_reps"]):
            for path in PATHS:
                if ("sim", k, path, rep) in done:
                    log(f"sim K={k} {path} rep {rep}: already in {out.name}, skipped")
                    continue
                result = run_sim(path, jobs[k][path], k, roots[k], work, rep, settings["timeout"])
                row = record("sim", k, path, rep, result, refs[k], {"command_s": result.get("command_s")})
                append_jsonl(out, row)
                log(summary(row))
    for k in ks:
        if settings["poc_reps"] > 0:
            try:
                run_poc(
                    k, roots[k], jobs[k], work, settings["poc_reps"], settings["timeout"], refs, out, done,
                    settings["poc_start_timeout"],
                )  # fmt: skip
            except SetupError as error:  # recorded in the log, not in the records: a rerun resumes here
                log(f"poc K={k}: POC setup failed: {error}")
    print()
    print(table(read_jsonl(out)))  # every run in the file, resumed ones included


register("collab", lambda: table(read_jsonl(RESULTS)))

suite(
    Suite(
        name="collab_vs_aux",
        about="one split-NN step: vflflare's aux-message path against NVFlare's Collab API (COLLAB_REPORT.md)",
        runner=run,
        datasets=("credit_default",),
        seeds=(SEED,),
        settings={
            "ks": (2, 4),  # sites
            "epochs": 21,  # 25 timed steps each (21: 525 steps)
            "sim_reps": 3,
            "poc_reps": 2,
            "work": "/tmp/vflflare_collab_bench",  # splits, jobs and workspaces
            "timeout": 600,  # seconds per job
            # seconds for all sites to connect; a loaded 2-core machine needed more than 120 for K=4
            "poc_start_timeout": 300,
            "fresh": False,  # start the records over instead of resuming
        },
        records=RESULTS.name,
    )
)
