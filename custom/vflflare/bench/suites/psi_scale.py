"""PSI that scales (issue 41, item 2): wall and CPU seconds of exact PSI over N x N IDs, two sites.

Methods (each a record per N):

- `ecdh`: vflflare's two-site ECDH-PSI (protocol/ecdh_psi.py, what the PSI job runs for two sites), both
  parties in this process, one after the other at every step, each on `workers` threads: each site's CPU
  seconds are measured alone. `wall_s` is the sum of all steps with the sites taking turns on this
  machine's cores (two sites sharing one machine); `wall_own_cores_s` sums per step the slower site's wall
  (each site on its own machine with `workers` cores).
- `nvflare_dh`: the previous path, NVFlare's DH-PSI forward and backward passes (NVFlare's PSIClient and
  vflflare's ExactPSIServer, as `ExactDhPSITaskHandler` runs them, one core), same measurement; only up to
  `old_max` IDs (it costs about 0.5 ms of CPU per ID).
- `simulator`: the PSI job (PSIRecipe's job, the IDs from `SyntheticPSI`) in NVFlare's simulator, with the
  protocol of `simulator_protocols`; wall of the whole simulator run (start-up included), CPU of the
  simulator's process tree, and the CPU of each site's process when it saved its intersection.

Every record checks the result: each site's intersection equals the plain set intersection, in the
site's own item order (`exact`). IDs: N per site, a fraction `overlap` shared, drawn from `seed`.

    vflflare bench run psi_scale --committed
    vflflare bench run psi_scale --methods ecdh --set sizes='[1000000]' --out /tmp/psi.jsonl

PSI_SCALE_SECTION.md's table comes from benchmarks/results/psi_scale.jsonl: `tables(records)`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from nvflare.apis.event_type import EventType
from nvflare.apis.fl_context import FLContext
from nvflare.app_common.psi.psi_spec import PSI
from nvflare.app_common.psi.psi_writer_spec import PSIWriter

from vflflare.bench.paths import COMMITTED
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import table
from vflflare.simulation import SIMULATOR_MODULE

RESULTS = COMMITTED / "psi_scale.jsonl"
FPR = 1e-11  # NVFlare's default; RAW setup, so it does not matter


# ------------------------------------------------------------------------------------------- data
def synthetic_ids(n: int, overlap: float, seed: int) -> tuple[list[str], list[str]]:
    """Two sites' items: n tagged IDs each, round(overlap * n) of them shared, each list in random order."""
    rng = np.random.default_rng(seed)
    shared = round(overlap * n)
    values = rng.permutation(2 * n - shared) + 10**9  # distinct numbers, no ID a prefix of another
    a = np.concatenate([values[:shared], values[shared:n]])
    b = np.concatenate([values[:shared], values[n:]])
    return [f"train:id{v}" for v in rng.permutation(a)], [f"train:id{v}" for v in rng.permutation(b)]


def expected(own: list[str], other: list[str]) -> list[str]:
    """The plain set intersection, in the order of `own` (what every PSI path must give a site)."""
    members = set(other)
    return [x for x in own if x in members]


# --------------------------------------------------------------------------- in-process measurement
class _Meter:
    """CPU and wall seconds per site; only one site works at a time, so process CPU is that site's."""

    def __init__(self) -> None:
        self.cpu = {"a": 0.0, "b": 0.0}
        self.wall = {"a": 0.0, "b": 0.0}
        self.own_cores = 0.0  # per step, the slower site's wall

    def step(self, **calls):  # noqa: ANN003, ANN201 - site -> a call of no arguments
        out, walls = {}, []
        for site, call in calls.items():
            cpu, wall = time.process_time(), time.perf_counter()
            out[site] = call()
            walls.append(time.perf_counter() - wall)
            self.cpu[site] += time.process_time() - cpu
            self.wall[site] += walls[-1]
        self.own_cores += max(walls)
        return out


def run_ecdh(a: list[str], b: list[str], workers: int) -> tuple[dict, list[str], list[str]]:
    from vflflare.protocol.ecdh_psi import ECDHParty

    meter = _Meter()
    parties = meter.step(a=lambda: ECDHParty(a, workers), b=lambda: ECDHParty(b, workers))
    offers = meter.step(a=parties["a"].offer, b=parties["b"].offer)
    answers = meter.step(a=lambda: parties["a"].answer(offers["b"]), b=lambda: parties["b"].answer(offers["a"]))
    found = meter.step(
        a=lambda: parties["a"].intersection(answers["b"]), b=lambda: parties["b"].intersection(answers["a"])
    )
    bytes_sent = {site: len(offers[site]) + len(answers[site]) for site in "ab"}
    return _measured(meter, bytes_sent), found["a"], found["b"]


def run_nvflare_dh(a: list[str], b: list[str]) -> tuple[dict, list[str], list[str]]:
    """NVFlare's DhPSIWorkFlow for two sites of equal size: site a is the PSI server of the forward pass,
    site b its client; the backward pass runs b (holding the intersection) as server for a."""
    meter, sent = _Meter(), {"a": 0, "b": 0}
    found_b = _dh_pass(meter, sent, ("a", a), ("b", b))  # forward: b learns its intersection with a
    found_a = _dh_pass(meter, sent, ("b", found_b), ("a", a))  # backward: a learns it from b
    return _measured(meter, sent), found_a, found_b


def _dh_pass(meter: _Meter, sent: dict, server: tuple[str, list[str]], client: tuple[str, list[str]]) -> list[str]:
    """One pass of NVFlare's DH-PSI, each step timed on the site that runs it: the client learns which of
    its items the server holds."""
    from nvflare.app_opt.psi.dh_psi.dh_psi_client import PSIClient

    from vflflare.flare.psi import ExactPSIServer

    (s, server_items), (c, items) = server, client
    ends = meter.step(**{s: lambda: ExactPSIServer(server_items, FPR), c: lambda: PSIClient(items)})
    setup = meter.step(**{s: lambda: ends[s].setup(len(items))})[s]
    request = meter.step(**{c: lambda: (ends[c].receive_setup(setup), ends[c].get_request(items))[1]})[c]
    response = meter.step(**{s: lambda: ends[s].process_request(request)})[s]
    sent[s] += len(setup) + len(response)
    sent[c] += len(request)
    return meter.step(**{c: lambda: ends[c].get_intersection(response)})[c]


def _measured(meter: _Meter, sent: dict[str, int]) -> dict:
    total = sum(meter.cpu.values())
    return {
        "wall_s": round(sum(meter.wall.values()), 2),
        "wall_own_cores_s": round(meter.own_cores, 2),
        "cpu_s_per_site": {f"site-{i}": round(meter.cpu[s], 2) for i, s in ((1, "a"), (2, "b"))},
        "cpu_s_total": round(total, 2),
        "bytes_sent_per_site": {f"site-{i}": sent[s] for i, s in ((1, "a"), (2, "b"))},
    }


# ------------------------------------------------------------------------------ NVFlare simulator
class SyntheticPSI(PSI):
    """A bench site's PSI items: its half of `synthetic_ids(n, overlap, seed)` (site-1: the first list)."""

    def __init__(self, n: int, overlap: float, seed: int, psi_writer_id: str = "psi_writer") -> None:
        super().__init__(psi_writer_id)
        self.n, self.overlap, self.seed = n, overlap, seed

    def load_items(self) -> list[str]:
        _CPU_AT_LOAD.append(time.process_time())  # the site process's CPU before its PSI work
        position = int(self.fl_ctx.get_identity_name().rsplit("-", 1)[1]) - 1
        return synthetic_ids(self.n, self.overlap, self.seed)[position]


_CPU_AT_LOAD: list[float] = []


class BenchPSIWriter(PSIWriter):
    """At the end of the run, writes the site's intersection and its process's CPU seconds from the start of
    loading its IDs (the synthetic IDs' generation included) to `<out_dir>/<site>.json`. (At the end: with
    NVFlare's passes a site saves its intersection before its last step as a PSI server.)"""

    def __init__(self, out_dir: str) -> None:
        super().__init__()
        self.out_dir = out_dir
        self.intersection: list[str] | None = None

    def save(self, intersection: list[str], overwrite_existing: bool, fl_ctx: FLContext) -> None:
        self.intersection = list(intersection)

    def handle_event(self, event_type: str, fl_ctx: FLContext) -> None:
        super().handle_event(event_type, fl_ctx)
        if event_type == EventType.END_RUN and self.intersection is not None:
            cpu = time.process_time() - (_CPU_AT_LOAD[0] if _CPU_AT_LOAD else 0.0)
            record = {"cpu_s": cpu, "pid": os.getpid(), "intersection": self.intersection}
            Path(self.out_dir, f"{fl_ctx.get_identity_name()}.json").write_text(json.dumps(record))


def psi_job(folder: Path, n: int, overlap: float, seed: int, protocol: str, workers: int, out_dir: Path) -> Path:
    """The PSI job of `vflflare jobs` (PSIRecipe), its ID source and writer swapped for the bench's."""
    from vflflare.jobs import write_psi_job

    job = write_psi_job(folder, name="psi_scale")
    client = next(job.glob("*/config/config_fed_client.json"))
    config = json.loads(client.read_text())
    here = f"{__name__}."
    for component in config["components"]:
        if component["id"] == "local_psi":
            component.update(path=here + "SyntheticPSI", args={"n": n, "overlap": overlap, "seed": seed})
        elif component["id"] == "psi_writer":
            component.update(path=here + "BenchPSIWriter", args={"out_dir": str(out_dir)})
        elif component["id"] == "dh_psi":
            component["args"]["workers"] = workers
    client.write_text(json.dumps(config, indent=2))
    server = next(job.glob("*/config/config_fed_server.json"))
    config = json.loads(server.read_text())
    config["workflows"][0]["args"]["protocol"] = protocol
    server.write_text(json.dumps(config, indent=2))
    return job


def run_simulator(n: int, overlap: float, seed: int, protocol: str, workers: int) -> tuple[dict, list[str], list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp, "out")
        out_dir.mkdir()
        job = psi_job(Path(tmp, "jobs"), n, overlap, seed, protocol, workers, out_dir)
        command = [sys.executable, "-m", SIMULATOR_MODULE, str(job)]
        command += ["-w", str(Path(tmp, "ws")), "-n", "2", "-t", "2"]
        started = time.perf_counter()
        log = Path(tmp, "simulator.log").open("w")
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        outputs = {p.stem: json.loads(p.read_text()) for p in out_dir.glob("*.json")}
        results = next(Path(tmp, "ws").rglob("psi_results.json"), None)
        summary = json.loads(results.read_text()) if results else {}
        if os.waitstatus_to_exitcode(status) != 0 or len(outputs) != 2 or "error" in summary:
            tail = Path(tmp, "simulator.log").read_text()[-3000:]
            raise RuntimeError(f"the PSI simulator job failed ({summary.get('error')}):\n{tail}")
    measured = {
        "wall_s": round(wall, 2),
        "psi_phase_wall_s": round(summary["wall_s"], 2),
        "cpu_s_tree": round(usage.ru_utime + usage.ru_stime, 2),
        "cpu_s_per_site": {site: round(outputs[site]["cpu_s"], 2) for site in sorted(outputs)},
        "protocol_ran": summary["psi"].get("protocol"),
    }
    measured["cpu_s_total"] = round(sum(measured["cpu_s_per_site"].values()), 2)
    return measured, outputs["site-1"]["intersection"], outputs["site-2"]["intersection"]


# ------------------------------------------------------------------------------------------ suite
def measure(method: str, n: int, settings: dict[str, Any], protocol: str = "ecdh") -> dict:
    overlap, seed, workers = settings["overlap"], settings["seed"], settings["workers"]
    a, b = synthetic_ids(n, overlap, seed)
    load = os.getloadavg()[0]
    if method == "ecdh":
        measured, found_a, found_b = run_ecdh(a, b, workers)
    elif method == "nvflare_dh":
        measured, found_a, found_b = run_nvflare_dh(a, b)
    else:
        measured, found_a, found_b = run_simulator(n, overlap, seed, protocol, workers)
    exact = found_a == expected(a, b) and found_b == expected(b, a)
    per_site = measured["cpu_s_per_site"]
    record = {
        "method": method if method != "simulator" else f"simulator_{protocol}",
        "n_per_site": n,
        "overlap": overlap,
        "intersection": len(found_a),
        "exact": exact,
        "workers": 1 if method == "nvflare_dh" else workers,
        **measured,
        "cpu_ms_per_id_per_site": round(1000 * max(per_site.values()) / n, 4),
        "cpu_ms_per_id_both_sites": round(1000 * measured["cpu_s_total"] / n, 4),
        "loadavg_1min_before": round(load, 2),
        "seed": seed,
    }
    if not exact:
        raise AssertionError(f"{record['method']} at N={n}: the intersection is not the plain set intersection")
    return record


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    settings = dict(spec.settings)
    env = environment_record()
    plan: list[tuple[str, int, str]] = []
    for method in spec.methods:
        if method == "ecdh":
            plan += [("ecdh", n, "ecdh") for n in settings["sizes"]]
        elif method == "nvflare_dh":
            plan += [("nvflare_dh", n, "nvflare") for n in settings["sizes"] if n <= settings["old_max"]]
        elif method == "simulator":
            plan += [("simulator", n, p) for p in settings["simulator_protocols"] for n in settings["simulator_sizes"]]
            plan = [(m, n, p) for m, n, p in plan if m != "simulator" or p == "ecdh" or n <= settings["old_max"]]
    for method, n, protocol in plan:
        record = measure(method, n, settings, protocol)
        record["command"] = f"vflflare bench run psi_scale --methods {method} --set sizes='[{n}]'" + (
            f" --set simulator_sizes='[{n}]' --set simulator_protocols='[\"{protocol}\"]'"
            if method == "simulator"
            else ""
        )
        record["env"] = env
        print(json.dumps({k: v for k, v in record.items() if k != "env"}), flush=True)
        append_jsonl(out, record)


def projection(records: list[dict], method: str = "ecdh", target: int = 10_000_000) -> dict | None:
    """Least-squares fit cpu = c0 + c1 * N (per site and both sites) over a method's records, at `target`."""
    rows = sorted((r for r in records if r["method"] == method), key=lambda r: r["n_per_site"])
    if len(rows) < 2:
        return None
    n = np.array([r["n_per_site"] for r in rows], dtype=float)
    out = {"method": method, "target": target, "points": [int(x) for x in n]}
    for key, values in (
        ("cpu_s_per_site", [max(r["cpu_s_per_site"].values()) for r in rows]),
        ("cpu_s_total", [r["cpu_s_total"] for r in rows]),
        ("wall_s", [r["wall_s"] for r in rows]),
    ):
        slope, intercept = np.polyfit(n, np.array(values, dtype=float), 1)
        out[key] = {
            "ms_per_id": round(1000 * slope, 4),
            "fixed_s": round(intercept, 2),
            "at_target_s": round(intercept + slope * target, 1),
        }
    return out


OLD = ("nvflare_dh", "simulator_nvflare")  # the previous path: NVFlare's forward and backward passes, one core


def _ms(value: float) -> str:
    return f"{value:.3f}"


def tables(records: list[dict]) -> str:
    """Table 1: every record. Table 2: old against new at the largest N both paths ran, in process and in the
    simulator. Then the 10M projection of the in-process `ecdh` records (a line of text)."""
    lines = [
        "| method | N per site | exact | wall s | own cores / PSI phase s | CPU s site-1 / site-2 "
        "| CPU ms/ID per site | CPU ms/ID both sites |",
        "|" + "---|" * 8,
    ]
    for r in sorted(records, key=lambda r: (r["method"] in OLD, r["method"], r["n_per_site"])):
        cpu = r["cpu_s_per_site"]
        own = r.get("wall_own_cores_s", r.get("psi_phase_wall_s", ""))
        lines.append(
            f"| {r['method']}{' (old)' if r['method'] in OLD else ''} | {r['n_per_site']:,} | {r['exact']} | "
            f"{r['wall_s']} | {own} | {cpu['site-1']} / {cpu['site-2']} | {_ms(r['cpu_ms_per_id_per_site'])} | "
            f"{_ms(r['cpu_ms_per_id_both_sites'])} |"
        )
    by = {(r["method"], r["n_per_site"]): r for r in records}
    common = [n for (m, n) in by if m == "nvflare_dh" and ("ecdh", n) in by]
    if common:
        n = max(common)
        rows = [
            ("CPU over both sites, s", "nvflare_dh", "ecdh", "cpu_s_total"),
            ("wall with the sites sharing the cores, s", "nvflare_dh", "ecdh", "wall_s"),
            ("PSI phase in the simulator, s", "simulator_nvflare", "simulator_ecdh", "psi_phase_wall_s"),
        ]
        lines += ["", f"| at N = {n:,} per site | old | new | old / new |", "|---|---|---|---|"]
        for label, old, new, key in rows:
            if (old, n) in by and (new, n) in by:
                a, b = by[(old, n)][key], by[(new, n)][key]
                lines.append(f"| {label} | {a} | {b} | {a / b:.1f} |")
    fit = projection(records)
    if fit:
        lines += ["", f"Linear fit over the ecdh records, projected to N = {fit['target']:,}: {json.dumps(fit)}"]
    return "\n".join(lines)


@table("psi_scale")
def committed_tables() -> str:
    return tables(read_jsonl(RESULTS))


suite(
    Suite(
        name="psi_scale",
        about="exact two-site PSI over N x N IDs: wall and CPU seconds per site, old (NVFlare DH) and new (ECDH) path",
        runner=run,
        datasets=("synthetic",),
        methods=("ecdh", "nvflare_dh", "simulator"),
        seeds=(0,),
        settings={
            "sizes": [10_000, 100_000, 300_000, 1_000_000],
            "old_max": 100_000,  # nvflare_dh (and the simulator with protocol nvflare) only up to this N
            "overlap": 0.5,
            "seed": 0,
            "workers": 2,
            "simulator_sizes": [100_000, 1_000_000],
            "simulator_protocols": ["ecdh", "nvflare"],
        },
        records="psi_scale.jsonl",
    )
)
