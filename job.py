"""Run a vflflare algorithm as an NVFlare 2.9 job, the way NVFlare's examples run theirs:

    python job.py --algorithm oneshot --sites 2 --env sim
    python job.py --algorithm fewshot --sites 3 --env poc --data-root /data/my_split --set ssl_epochs=5
    python job.py --algorithm oneshot --sites bank-a,bank-b --env sim   # sites by name: exactly these take part
    python job.py --algorithm oneshot --env prod --sites site-a,site-b --startup-kit /path/to/admin@example.com
    python job.py --algorithm oneshot --export --export-dir /tmp/jobs   # write the job folder only

`--export` and `--export-dir` are NVFlare's own recipe flags (consumed by nvflare.recipe before this
script parses its arguments). Sites read their data root from their local/vflflare.json, else from
VFLFLARE_DATA_ROOT (which --data-root sets for the sim and poc processes started here), else use the
embedded default dataset.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from vflflare.cli import parse_overrides, parse_site_names
from vflflare.config import SERVER
from vflflare.simulation import find_results, quiet_log_config
from vflflare.user_paths import user_temp

# NVFlare's recipes and the plug-ins (torch) load after the arguments parse: `--help` answers at once


# the built-in plug-ins, for --help (tests/test_job_py.py checks it against the registry)
ALGORITHM_NAMES = [
    "oneshot",
    "fewshot",
    "vanilla",
    "fedbcd",
    "ssvfl_i",
    "ssvfl_c",
    "fedhssl",
    "vflhlp",
    "cfl",
    "vertical_inference",
    "secure_sum",
]


def parse_args() -> argparse.Namespace:
    if {"--export", "--export-dir"} & set(sys.argv):  # NVFlare's recipe flags: importing it strips them
        import nvflare.recipe.spec  # noqa: F401
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--algorithm",
        default="oneshot",
        help="a registered plug-in: " + ", ".join(ALGORITHM_NAMES) + ", or one that config plugins register",
    )
    parser.add_argument(
        "--sites",
        default="2",
        help="the feature sites: a number K >= 2 (site-1 .. site-K, at "
        "least K must take part) or comma-separated names (exactly these must take part)",
    )
    parser.add_argument("--env", default="sim", choices=["sim", "poc", "prod"])
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an algorithm setting (repeatable); values parse as JSON when they can",
    )
    parser.add_argument("--label-owner", default=SERVER, help="'server' or a site name")
    parser.add_argument("--he", action="store_true", help="CKKS-encrypt what the sites send")
    parser.add_argument("--psi", action="store_true", help="run NVFlare's DH-PSI first and align on it")
    parser.add_argument("--data-root", help="split folder with one sub-folder per site (sim, poc)")
    parser.add_argument(
        "--workspace",
        default=str(user_temp("job_py")),
        help="simulator workspace root (default: %(default)s, your own)",
    )
    parser.add_argument("--startup-kit", help="admin startup kit of a provisioned project (prod)")
    parser.add_argument("--bundle-code", action="store_true", help="ship the vflflare package inside the job")
    parser.add_argument(
        "--mlflow",
        metavar="URI",
        help="also stream the curves to this MLflow tracking URI "
        "('' : an SQLite store in the server's job result folder)",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for a poc/prod job")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="sim: NVFlare's full console log (default: its "
        "warnings and vflflare's own lines; the workspace's log files hold everything either way)",
    )
    return parser.parse_args()


def site_args(text: str) -> tuple[int | None, list[str] | None]:
    """--sites: (K, None) for a number, (None, names) for names."""
    text = text.strip()
    return (int(text), None) if text.isdigit() else (None, parse_site_names(text, "--sites"))


def exec_env(args: argparse.Namespace):
    from nvflare.recipe import PocEnv, ProdEnv, SimEnv

    count, names = site_args(args.sites)
    if args.env == "sim":
        return SimEnv(
            num_clients=count or 0,
            clients=names,
            workspace_root=args.workspace,
            log_config=None if args.verbose else quiet_log_config(),
        )
    if args.env == "poc":
        # the POC's processes run `python3` from PATH: make it this interpreter's environment
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return PocEnv(num_clients=count or len(names), clients=names)
    if not args.startup_kit:
        raise SystemExit("--env prod needs --startup-kit (the admin's startup kit folder)")
    if names is None:
        raise SystemExit(
            "--env prod needs the sites by name (--sites site-a,site-b): exactly these take part, and "
            "any other site of the project is refused"
        )
    from vflflare.flare.site_config import kit_username

    return ProdEnv(startup_kit_location=args.startup_kit, username=kit_username(args.startup_kit))


def run_environment(args: argparse.Namespace) -> dict:
    """What the scoring command printed after training needs to run where this job ran (results.py)."""
    if args.env == "prod":
        return {"kind": "prod", "startup_kit": str(Path(args.startup_kit).resolve())}
    root = str(Path(args.data_root).resolve()) if args.data_root else None
    return {"kind": "simulator" if args.env == "sim" else "poc", "data_root": root}


def main() -> int:
    args = parse_args()
    if args.data_root:
        os.environ["VFLFLARE_DATA_ROOT"] = str(Path(args.data_root).resolve())
    from vflflare.recipes import VFLRecipe
    from vflflare.registry import algorithms
    from vflflare.results import format_table

    if args.algorithm not in algorithms():
        raise SystemExit(f"job.py: unknown --algorithm {args.algorithm!r}; known: {', '.join(sorted(algorithms()))}")
    count, names = site_args(args.sites)
    try:
        recipe = VFLRecipe(
            algorithm=args.algorithm,
            min_clients=count,
            sites=names,
            config=parse_overrides(args.set),
            label_owner=args.label_owner,
            he=args.he,
            psi=args.psi,
            bundle_code=args.bundle_code,
            mlflow_uri=args.mlflow,
        )
    except ValueError as error:  # a setting the algorithm refuses (ConfigError), named: one line, no traceback
        raise SystemExit(f"job.py: {error}") from None
    started = time.time()
    run = recipe.execute(exec_env(args))
    workspace = run.get_result(timeout=args.timeout, clean_up=False)
    path = find_results(workspace) if workspace else None
    if path is None or path.stat().st_mtime < started:  # not one an earlier run left there
        print(f"job {run.get_job_id()} ended with status {run.get_status()} and no results under {workspace}")
        return 1
    results = json.loads(path.read_text())
    # where the printed scoring command runs: this run's environment (the simulator's coordinator says so itself)
    results.setdefault("environment", run_environment(args))
    if args.env != "sim":  # the simulator's coordinator printed it on this console already
        print(format_table(results))
    print(f"results: {path}")
    return 1 if "error" in results else 0


if __name__ == "__main__":
    sys.exit(main())
