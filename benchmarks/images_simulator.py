"""Every algorithm on MNIST and CIFAR-10 halves in the NVFlare simulator (2 sites, small subsets, short
runs): that each job runs end to end on image strips, with the communication its protocol implies and
the in-process metrics. Accuracy at scale is benchmarks/images.py's job.

    python benchmarks/images_simulator.py --out /tmp/vflflare_images_sim    # prints a Markdown table
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from vflflare.algorithms.registry import make_config
from vflflare.cli import main as cli_main
from vflflare.cli import simulate
from vflflare.jobs import write_job
from vflflare.protocol.inprocess import run_inprocess

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"
SHORT = {"ssl_epochs": 5, "split_epochs": 10, "split_patience": 10, "pretrain_epochs": 5}
METHODS = {"vanilla": {}, "fedbcd": {}, "oneshot": {}, "fewshot": {}, "fewshot+finetune": {"finetune_epochs": 5},
           "ssvfl_i": {}, "ssvfl_c": {}}
SITES = ["site-1", "site-2"]


def settings(method: str) -> dict:
    algorithm = method.split("+")[0]
    known = make_config(algorithm=algorithm).to_dict()
    return {"algorithm": algorithm, **{k: v for k, v in SHORT.items() if k in known}, **METHODS[method]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/tmp/vflflare_images_sim")
    parser.add_argument("--datasets", default="mnist,cifar10")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args(argv)
    out = Path(args.out)
    rows = []
    for dataset in args.datasets.split(","):
        split = out / "splits" / dataset
        if not (split / "manifest.json").exists():
            code = cli_main(["split", "--dataset", dataset, "--data-dir", str(DATA_DIR), "--sites", "2", "--overlap",
                             "256", "--seed", "0", "--train-rows", "1200", "--test-rows", "400", "--out", str(split)])
            if code:
                return code
        for method in args.methods.split(","):
            config = settings(method)
            job = write_job(out / "jobs", f"{dataset}_{method.replace('+', '_')}", config)
            started = time.monotonic()
            results = simulate(str(job), str(out / "ws" / job.name), 2, 2, str(split), timeout=1800)
            wall = time.monotonic() - started
            reference = run_inprocess(make_config(**config), SITES, str(split))
            comm = results["communication"]["per_site"]
            expected = results["expected_communication"]
            row = {
                "dataset": dataset, "method": method, "error": results.get("error"),
                "test_accuracy": results["metrics"].get("test_accuracy"),
                "same_as_inprocess": results["metrics"] == reference["metrics"]
                and comm == reference["communication"]["per_site"],
                "per_site": {s: [c["uploads"], c["downloads"], round(c["payload_bytes"] / 1e6, 3)] for s, c in comm.items()},
                "as_expected": all([comm[s]["uploads"], comm[s]["downloads"]] ==
                                   [expected[s]["uploads"], expected[s]["downloads"]] for s in comm),
                "wall_s": round(wall, 1),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print("\n| dataset | method | test accuracy | site-1 up/down, payload MB | counts as the protocol says | "
          "same as in process | simulator wall s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        up, down, mb = r["per_site"]["site-1"]
        print(f"| {r['dataset']} | {r['method']} | {r['test_accuracy']:.3f} | {up}/{down}, {mb} | "
              f"{'yes' if r['as_expected'] else 'NO'} | {'yes' if r['same_as_inprocess'] else 'NO'} | {r['wall_s']} |")
    return 0 if all(not r["error"] and r["as_expected"] and r["same_as_inprocess"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
