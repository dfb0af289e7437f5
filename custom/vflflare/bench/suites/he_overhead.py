"""What CKKS homomorphic encryption (`he: true`) costs: NVFlare simulator, 2 sites, labels on site-1.

(a) One-shot VFL and (b) a per-batch split-NN job (vanilla VFL, a fixed number of epochs so both modes
    do the same steps), each with HE off and on, alternated, `reps` times each. Reported: medians of
    - the simulator command's wall time and the job's own wall time (result record), with and without
      the 'setup' phase (simulator start-up, data loading; HE only adds loading the key there),
    - the split-NN per-batch step latency (ledger 'step_latency'),
    - bytes on the wire (serialised message bodies, what the ledger calls wire_bytes) and payload bytes.
(c) The codec alone, in-process: encrypt / decrypt / add per 4096-slot chunk and its ciphertext size.

    vflflare bench run he_overhead --set reps=3                        # embedded default (breast cancer)
    vflflare bench run he_overhead --datasets credit --set reps=1      # credit default, N_o = 1000
    vflflare bench tables        # HE_REPORT.md's tables from the committed records (results/he_overhead.jsonl)
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

import numpy as np

from vflflare.bench.inprocess import limit_threads
from vflflare.bench.paths import COMMITTED, DEFAULT_SPLITS
from vflflare.bench.provenance import environment_record
from vflflare.bench.records import append_jsonl, read_jsonl
from vflflare.bench.splits import SITES, prepare_split
from vflflare.bench.suite import Suite, suite
from vflflare.bench.tables import table
from vflflare.jobs import write_job
from vflflare.privacy import ckks
from vflflare.simulation import simulate

RESULTS = COMMITTED / "he_overhead.jsonl"
SEED, OVERLAP = 0, 1000
LABEL_OWNER = "site-1"
SPLIT_EPOCHS = 10
JOBS = {
    "oneshot": {"algorithm": "oneshot"},
    # patience = epochs: no early stop, so HE on and off run exactly the same steps
    "vanilla": {"algorithm": "vanilla", "split_epochs": SPLIT_EPOCHS, "split_patience": SPLIT_EPOCHS},
}


def credit_split(data_dir: Path, splits_dir: Path) -> Path:
    """Credit default, N_o = 1000, seed 0, with the label files on site-1 (HE needs a label-owning site)."""
    return prepare_split(data_dir, OVERLAP, SEED, splits_dir, label_owner=LABEL_OWNER)


def run_simulator(dataset: str, job_name: str, he: bool, root: Path | None, work: Path, rep: int) -> dict:
    overrides = {**JOBS[job_name], "seed": SEED, "label_owner": LABEL_OWNER, "he": he}
    name = f"{job_name}_{'he' if he else 'plain'}"
    job = write_job(work / "jobs", name, overrides)
    workspace = work / f"ws_{name}_{rep}"
    shutil.rmtree(workspace, ignore_errors=True)
    if he:
        ckks.write_contexts(workspace / "startup")  # = vflflare he-keys -w workspace
    start = time.perf_counter()
    result = simulate(str(job), str(workspace), len(SITES), len(SITES), str(root) if root else None, timeout=1800)
    command_s = time.perf_counter() - start
    if "error" in result:
        raise RuntimeError(f"{name} failed: {result['error']}")
    shutil.rmtree(workspace, ignore_errors=True)
    phases = result["phases"]
    return {
        "kind": "job",
        "dataset": dataset,
        "job": job_name,
        "he": he,
        "rep": rep,
        "command_s": round(command_s, 3),
        "job_s": result["wall_s"],
        "job_without_setup_s": round(sum(p["wall_s"] for p in phases if p["name"] != "setup"), 4),
        "phases": phases,
        "step_latency": result.get("step_latency", {}),
        "metrics": result["metrics"],
        "rows": result["rows"],
        "communication": result["communication"]["total"],
        "tensor_kinds": result["communication"].get("tensor_kinds"),
    }


def codec_timings(repeats: int = 20) -> dict:
    server_bytes, client_bytes = ckks.make_contexts()
    server, client = ckks.load_context(server_bytes, "server"), ckks.load_context(client_bytes, "client")
    x = np.random.default_rng(0).standard_normal(client.slot_count).astype(np.float32)
    enc_s, dec_s, add_s = [], [], []
    for _ in range(repeats):
        t = time.perf_counter()
        enc = ckks.encrypt(x, client)
        enc_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        ckks.decrypt(enc, client)
        dec_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        ckks.add([enc, enc], server)
        add_s.append(time.perf_counter() - t)
    small = ckks.encrypt(x[:32], client)
    return {
        "kind": "codec",
        "slots": client.slot_count,
        "encrypt_ms": round(1000 * statistics.median(enc_s), 3),
        "decrypt_ms": round(1000 * statistics.median(dec_s), 3),
        "add2_ms": round(1000 * statistics.median(add_s), 3),
        "ciphertext_bytes_full_chunk": len(enc["chunks"][0]),
        "ciphertext_bytes_32_values": len(small["chunks"][0]),
        "float32_bytes_full_chunk": int(x.nbytes),
        "server_context_bytes": len(server_bytes),
        "client_context_bytes": len(client_bytes),
    }


def _med(rows: list[dict], get) -> float:
    return statistics.median(get(r) for r in rows)


def tables(records: list[dict]) -> str:
    out = []
    codec = [r for r in records if r["kind"] == "codec"]
    if codec:
        c = codec[-1]
        out += [
            f"CKKS codec, one chunk of {c['slots']} float32 values (median of 20, in-process)\n",
            "| encrypt | decrypt | add 2 (server context) | ciphertext | float32 | ratio | ciphertext of 32 values |",
            "|---|---|---|---|---|---|---|",
            f"| {c['encrypt_ms']:.1f} ms | {c['decrypt_ms']:.1f} ms | {c['add2_ms']:.1f} ms | "
            f"{c['ciphertext_bytes_full_chunk'] / 1e3:.0f} kB | {c['float32_bytes_full_chunk'] / 1e3:.0f} kB | "
            f"{c['ciphertext_bytes_full_chunk'] / c['float32_bytes_full_chunk']:.1f}x | "
            f"{c['ciphertext_bytes_32_values'] / 1e3:.0f} kB |",
            f"\nContexts: server {c['server_context_bytes'] / 1e3:.0f} kB, client "
            f"{c['client_context_bytes'] / 1e3:.0f} kB.\n",
        ]
    jobs = [r for r in records if r["kind"] == "job"]
    for dataset in sorted({r["dataset"] for r in jobs}):
        for job in ("oneshot", "vanilla"):
            plain = [r for r in jobs if r["dataset"] == dataset and r["job"] == job and not r["he"]]
            he = [r for r in jobs if r["dataset"] == dataset and r["job"] == job and r["he"]]
            if not plain or not he:
                continue
            title = "one-shot VFL" if job == "oneshot" else f"split-NN (vanilla VFL, {SPLIT_EPOCHS} epochs)"
            out += [
                f"\n{title}, {dataset}, labels on {LABEL_OWNER}, seed {SEED}: median of {len(plain)} runs HE off, "
                f"{len(he)} HE on\n",
                "| measure | HE off | HE on | ratio on/off |",
                "|---|---|---|---|",
            ]
            measures = [
                ("simulator command (s)", lambda r: r["command_s"]),
                ("job wall_s (s)", lambda r: r["job_s"]),
                ("job without setup (s)", lambda r: r["job_without_setup_s"]),
            ]
            if job == "vanilla":
                measures.append(("median split-NN step (ms)", lambda r: r["step_latency"]["median_ms"]))
                measures.append(("p90 split-NN step (ms)", lambda r: r["step_latency"]["p90_ms"]))
            measures += [
                ("wire MB", lambda r: r["communication"]["wire_bytes"] / 1e6),
                ("payload MB", lambda r: r["communication"]["payload_bytes"] / 1e6),
                ("uploads + downloads", lambda r: r["communication"]["uploads"] + r["communication"]["downloads"]),
            ]
            for name, get in measures:
                a, b = _med(plain, get), _med(he, get)
                out.append(f"| {name} | {a:.3f} | {b:.3f} | {b / a:.2f}x |")
            metric = next(k for k in plain[0]["metrics"] if k.startswith("test_"))
            out.append(
                f"\n{metric}: HE off {sorted({round(r['metrics'][metric], 4) for r in plain})}, "
                f"HE on {sorted({round(r['metrics'][metric], 4) for r in he})}; "
                f"plaintext float tensors the coordinator received with HE on: "
                f"{sorted({r['tensor_kinds']['up']['plaintext'] for r in he})}"
            )
    return "\n".join(out)


DATA = {
    "default": ("embedded breast cancer (120 aligned train rows)", "embedded"),
    "credit": ("credit default, N_o = 1000", "credit default"),
}
TITLES = {"oneshot": "one-shot", "vanilla": f"split-NN, {SPLIT_EPOCHS} epochs"}


def summary_tables(records: list[dict]) -> str:
    """HE_REPORT's two tables: the wall-time ratios HE on / off and the bytes on the wire (medians)."""
    jobs = [r for r in records if r["kind"] == "job"]
    cells = []
    for job in ("oneshot", "vanilla"):
        for dataset in DATA:
            pair = [
                [r for r in jobs if r["dataset"] == dataset and r["job"] == job and r["he"] == he]
                for he in (False, True)
            ]
            if all(pair):
                cells.append((job, dataset, *pair))

    def ratio(off: list[dict], on: list[dict], get, unit: str = "", shown: bool = True) -> str:
        a, b = _med(off, get), _med(on, get)
        return f"{b / a:.2f}x" + (f" ({a:.1f} → {b:.1f}{unit})" if shown else "")

    out = [
        "| job | data | simulator command | job wall_s | job without setup | split-NN step (median) |",
        "|---|---|---|---|---|---|",
    ]
    for job, dataset, off, on in cells:
        step = ratio(off, on, lambda r: r["step_latency"]["median_ms"], " ms") if job == "vanilla" else "–"
        steps = "" if job == "oneshot" else f" ({off[0]['step_latency']['steps']} steps)"
        data = DATA[dataset][0] if job == "oneshot" else f"{DATA[dataset][1]}{steps}"
        out.append(
            f"| {TITLES[job]} | {data} | {ratio(off, on, lambda r: r['command_s'], ' s')} | "
            f"{ratio(off, on, lambda r: r['job_s'], shown=False)} | "
            f"{ratio(off, on, lambda r: r['job_without_setup_s'], ' s')} | {step} |"
        )
    out += [
        "",
        "| job | data | wire MB HE off | wire MB HE on | ratio | uploads + downloads |",
        "|---|---|---|---|---|---|",
    ]
    for job, dataset, off, on in cells:
        mb = [_med(rows, lambda r: r["communication"]["wire_bytes"] / 1e6) for rows in (off, on)]
        comms = [
            _med(rows, lambda r: r["communication"]["uploads"] + r["communication"]["downloads"]) for rows in (off, on)
        ]
        out.append(
            f"| {TITLES[job].split(',')[0]} | {DATA[dataset][1]} | {mb[0]:.3g} | {mb[1]:.3g} | "
            f"{mb[1] / mb[0]:.1f}x | {comms[0]:.0f} / {comms[1]:.0f} |"
        )
    return "\n".join(out)


def run(spec: Suite, out: Path, data_dir: Path) -> None:
    """The codec timings, then each job with HE off and on, alternated; each record appended to `out`."""
    limit_threads()
    env = environment_record()
    work = Path(spec.settings["work"])
    append_jsonl(out, {**codec_timings(), "env": env})
    for dataset in spec.datasets:
        root = credit_split(data_dir, DEFAULT_SPLITS) if dataset == "credit" else None
        # alternate HE off / on so drifting machine load hits both alike
        for rep in range(spec.settings["reps"]):
            for job in spec.methods:
                for he in (False, True):
                    record = run_simulator(dataset, job, he, root, work, rep)
                    append_jsonl(out, {**record, "env": env})
                    print(
                        f"{job:8s} he={he!s:5s} rep {rep}: command {record['command_s']:.1f} s, job "
                        f"{record['job_s']:.1f} s,"
                        f" without setup {record['job_without_setup_s']:.2f} s, wire "
                        f"{record['communication']['wire_bytes'] / 1e6:.2f} MB, step {record['step_latency']}",
                        flush=True,
                    )


@table("he_overhead")
def committed_tables() -> str:
    return summary_tables(read_jsonl(RESULTS))


suite(
    Suite(
        name="he_overhead",
        about="what CKKS homomorphic encryption costs in the NVFlare simulator (HE_REPORT.md)",
        runner=run,
        datasets=("default",),  # default: the embedded breast-cancer split; credit: credit default, N_o = 1000
        methods=tuple(JOBS),
        seeds=(SEED,),
        settings={"reps": 3, "work": "/tmp/vflflare-bench/he_overhead"},
        records="he_overhead.jsonl",
        needs_data=lambda spec: "credit" in spec.datasets,
    )
)
