"""`vflflare` command line: split a table into site files, generate job folders, run a job in the
NVFlare simulator (printing its results table), or run the same phases in-process."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from vflflare.config import ConfigError, JobConfig
from vflflare.data.errors import PartyError
from vflflare.protocol.topology import check_unique
from vflflare.results import format_table
from vflflare.simulation import simulate


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """--set key=value; values are JSON when they parse as JSON (numbers, true/false), else strings."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set expects key=value, got '{pair}'")
        try:
            overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key] = raw
    return overrides


def parse_site_names(text: str | None, flag: str) -> list[str] | None:
    """--sites a,b,c: the names, each once (a repeated name is called a duplicate, not "too few sites")."""
    if text is None:
        return None
    return check_unique([name.strip() for name in text.split(",")], f"{flag} {text}")


def _cmd_simulate(args: argparse.Namespace) -> int:
    sites = parse_site_names(args.sites, "--sites")
    n_sites = len(sites) if sites else args.n_clients
    if args.threads < n_sites:  # the simulator would only say that a site it never started is unreachable
        raise SystemExit(
            f"-t {args.threads} is fewer threads than the {n_sites} simulated sites: the simulator runs "
            f"each site in a thread of its own, and a site without one never starts; pass -t {n_sites}"
        )
    results = simulate(
        args.job, args.workspace, args.n_clients, args.threads, args.data_root, sites=sites, verbose=args.verbose
    )
    print(f"results: {results['results_path']}")  # the table: printed by the job's coordinator, above
    return 1 if "error" in results else 0


def _cmd_jobs(args: argparse.Namespace) -> int:
    from vflflare.jobs import write_default_jobs, write_job, write_psi_job

    if not args.name and (args.psi or args.sites):
        raise SystemExit("--psi and --sites shape one job: give it a --name (jobs/psi is among the default jobs)")
    sites = parse_site_names(args.sites, "--sites")
    if args.name and args.algorithm == "psi":
        if args.set or args.psi:
            raise SystemExit("--algorithm psi writes the PSI job alone: it takes no --set and no --psi")
        print(write_psi_job(args.out, args.name, args.min_sites, sites=sites))
    elif args.name:
        overrides = {"algorithm": args.algorithm, **parse_overrides(args.set)}
        print(write_job(args.out, args.name, overrides, args.min_sites, psi=args.psi, sites=sites))
    else:
        for path in write_default_jobs(args.out):
            print(path)
    return 0


def _cmd_inprocess(args: argparse.Namespace) -> int:
    from vflflare.protocol.inprocess import run_inprocess
    from vflflare.registry import make_config

    cfg = make_config({"algorithm": args.algorithm, **parse_overrides(args.set)})
    sites = parse_site_names(args.sites_names, "--sites-names") or [f"site-{i + 1}" for i in range(args.sites)]
    try:
        results = run_inprocess(cfg, sites, args.data_root)
    except Exception as error:
        if args.json:  # a script reading the file learns that the run failed, and why, as from a job's results
            Path(args.json).write_text(
                json.dumps(
                    {"algorithm": cfg.algorithm, "config": cfg.to_dict(), "error": f"{type(error).__name__}: {error}"},
                    indent=2,
                )
            )
        raise
    print(format_table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def _cmd_attack(args: argparse.Namespace) -> int:
    from vflflare.attacks.run import attack_run, attack_simulated, leak_table
    from vflflare.registry import make_config

    cfg = make_config({"algorithm": args.algorithm, **parse_overrides(args.set)})
    sites = parse_site_names(args.sites_names, "--sites-names") or [f"site-{i + 1}" for i in range(args.sites)]
    if args.env == "sim":
        workspace = args.workspace or tempfile.mkdtemp(prefix="vflflare-attack-")
        result = attack_simulated(cfg, sites, args.data_root, workspace)
    else:
        result = attack_run(cfg, sites, args.data_root)
    if args.json:  # every figure the table prints, and what it summarises
        keys = (
            "metrics",
            "leak",
            "majority",
            "leak_by_site",
            "attack_notes",
            "gradient_norm_median",
            "optimal_leak_bound",
            "optimal_leak_bound_colluding",
            "privacy",
        )
        print(
            json.dumps(
                {
                    "algorithm": result["algorithm"],
                    **{k: result[k] for k in keys if k in result},
                    "defense": result["defenses"],
                    "communication": result["communication"]["per_site"],
                },
                indent=2,
            )
        )
    else:
        print(leak_table([result]))
        print(
            f"leak: max(AUC, 1 - AUC) of each label attack's score (0.5 = chance) or, for more classes, the share "
            f"of labels recovered; strongest: the maximum over the label attacks; majority-class rate "
            f"{result['majority']}; feature_reconstruction: median R² over a site's input columns (0 = the column "
            f"mean)"
        )
        if "optimal_leak_bound" in result:
            print(
                f"optimal_leak_bound: {result['optimal_leak_bound']:.3f}, the AUC of the best possible test on one "
                f"site's noised gradients over every pass it received"
            )
        print(f"gradient_norm_median: {result['gradient_norm_median']}")
        if "dp" in result.get("privacy", {}):
            from vflflare.privacy.accounting import describe

            print("\n".join(line.strip() for line in describe(result["privacy"]["dp"])))
        for party, notes in result["attack_notes"].items():
            print("; ".join(f"{party}: {name} {why}" for name, why in notes.items()))
    return 0


def _cmd_settings(args: argparse.Namespace) -> int:
    from vflflare.registry import get_algorithm
    from vflflare.settings_reference import markdown

    print(f"Settings of '{args.algorithm}' jobs (`--set key=value`, a recipe's `config`, or config_fed_server.json):\n")
    print(markdown(get_algorithm(args.algorithm).Config))
    return 0


def _cmd_check_data(args: argparse.Namespace) -> int:
    from vflflare.cli.check_data import check_data, describe, problems
    from vflflare.data.errors import DataError

    if args.path and args.data_root and Path(args.path) != Path(args.data_root):
        print(
            f"vflflare check-data: error: give the folder once, as --data-root {args.data_root} or as {args.path}, "
            f"not both",
            file=sys.stderr,
        )
        return 2
    path = args.data_root or args.path or os.environ.get("VFLFLARE_DATA_ROOT")
    if not path:
        print(
            "vflflare check-data: error: which data? --data-root ROOT (a data root, or one site's folder)",
            file=sys.stderr,
        )
        return 2
    try:
        checks, report = check_data(Path(path), args.id_normalize)
    except DataError as error:
        print(error)
        return 1
    print("\n".join(describe(checks, report)))
    return 1 if problems(checks) else 0


def _cmd_models(args: argparse.Namespace) -> int:
    from vflflare.protocol.model_ids import format_models, list_models, runs_roots_of

    if args.root and args.data_root and Path(args.root) != Path(args.data_root):
        raise SystemExit(
            f"vflflare models: give the data root once (ROOT or --data-root), got {args.root} and {args.data_root}"
        )
    root = args.data_root or args.root
    if root is not None and not Path(root).is_dir():
        raise SystemExit(f"vflflare models: no folder {root}")
    for runs in runs_roots_of(root):
        print(format_models(runs, list_models(runs)))
    return 0


def _cmd_he_keys(args: argparse.Namespace) -> int:
    from vflflare.privacy.ckks import write_contexts

    startup = Path(args.workspace) / "startup"
    existed = all((startup / n).exists() for n in ("server_context.tenseal", "client_context.tenseal"))
    paths = write_contexts(startup, overwrite=args.force)
    verb = "kept" if existed and not args.force else "wrote"
    for role, path in paths.items():
        print(f"{verb} {role} context {path}")
    print(
        "the simulator copies WORKSPACE/startup/ into every participant's startup kit: run the job with -w "
        f"{args.workspace}"
    )
    return 0


# subcommands that run no algorithm: their process never imports the plug-ins (torch, scikit-learn, ...),
# which take seconds; `vflflare simulate` hands the job to NVFlare's own processes at once
LIGHT_COMMANDS = {"simulate", "split", "check-data", "he-keys", "models"}


def main(argv: list[str] | None = None) -> int:
    from vflflare.cli.split import configure_split_parser, run_split

    argv = sys.argv[1:] if argv is None else argv
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    algorithm_names: list[str] = []  # named only in the help of commands that run an algorithm
    if command not in LIGHT_COMMANDS:
        from vflflare.registry import algorithms

        algorithm_names = sorted(algorithms())

    parser = argparse.ArgumentParser(prog="vflflare", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)

    split = sub.add_parser("split", help="turn one table into per-site train/test files and label files")
    configure_split_parser(split)
    split.set_defaults(func=run_split)

    jobs = sub.add_parser("jobs", help="write NVFlare job folders")
    jobs.add_argument("--out", default="jobs")
    jobs.add_argument("--name", help="write one job with this name instead of the defaults")
    jobs.add_argument(
        "--algorithm",
        default=JobConfig.algorithm,
        help=f"a registered algorithm ({', '.join(algorithm_names)}), or psi: the PSI job alone (as jobs/psi)",
    )
    jobs.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="JobConfig field")
    jobs.add_argument(
        "--min-sites", type=int, help="at least this many sites must take part (default 2, or the number of --sites)"
    )
    jobs.add_argument(
        "--sites",
        help="comma-separated site names: exactly these must take part, or the job fails "
        "naming the missing or extra ones (sets --min-sites)",
    )
    jobs.add_argument(
        "--psi",
        action="store_true",
        help="run NVFlare's DH-PSI first in the same job and align on its result (sets alignment=psi)",
    )
    jobs.set_defaults(func=_cmd_jobs)

    sim = sub.add_parser("simulate", help="run a job folder in the NVFlare simulator and print its results")
    sim.add_argument("job")
    sim.add_argument("-w", "--workspace", required=True)
    sim.add_argument("-n", "--n-clients", type=int, default=2)
    sim.add_argument("--sites", help="comma-separated site names (instead of -n: site-1 .. site-n)")
    sim.add_argument("-t", "--threads", type=int, default=2)
    sim.add_argument("--data-root", help="sets VFLFLARE_DATA_ROOT (default: the embedded breast-cancer split)")
    sim.add_argument(
        "--verbose",
        action="store_true",
        help="NVFlare's full console log (default: its warnings "
        "and vflflare's own lines; the workspace's log files hold everything either way)",
    )
    sim.set_defaults(func=_cmd_simulate)

    inproc = sub.add_parser("inprocess", help="run the same phases without NVFlare (reference, benchmarks)")
    inproc.add_argument("--algorithm", default=JobConfig.algorithm, help=", ".join(algorithm_names))
    inproc.add_argument("--sites", type=int, default=2)
    inproc.add_argument("--sites-names", help="comma-separated site names (overrides --sites)")
    inproc.add_argument("--data-root", default=os.environ.get("VFLFLARE_DATA_ROOT"))
    inproc.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    inproc.add_argument("--json", help="also write the result record here")
    inproc.set_defaults(func=_cmd_inprocess)

    settings = sub.add_parser("settings", help="every setting of an algorithm's jobs: default, block, meaning")
    settings.add_argument("--algorithm", default=JobConfig.algorithm, help=", ".join(algorithm_names))
    settings.set_defaults(func=_cmd_settings)

    check = sub.add_parser("check-data", help="every problem in a site folder or a data root at once, before a job")
    check.add_argument(
        "--data-root",
        help="a data root (one folder per site, server/), or one site's folder "
        "(train.csv, test.csv, schema.json, score.csv); default: VFLFLARE_DATA_ROOT",
    )
    check.add_argument("path", nargs="?", help="the same as --data-root (the earlier form, still accepted)")
    check.add_argument("--id-normalize", nargs="*", default=[], help="the job's id_normalize steps")
    check.set_defaults(func=_cmd_check_data)

    models = sub.add_parser(
        "models",
        help="the models training runs saved under a data root (model ID, algorithm, "
        "when, sites, label owner, metric): what `--set model_job=` can name",
    )
    models.add_argument("root", nargs="?", help="the data root (as --data-root)")
    models.add_argument(
        "--data-root",
        help="the data root the models were trained on (default: VFLFLARE_RUNS_ROOT, "
        "else ~/.vflflare/runs, the embedded default's)",
    )
    models.set_defaults(func=_cmd_models)

    attack = sub.add_parser(
        "attack",
        help="run one algorithm in process and every attack on what each party received "
        "(those of a party that knows the code, the job's configuration and every "
        "message it got; with 3 or more sites also the sites colluding)",
    )
    attack.add_argument("--algorithm", default=JobConfig.algorithm, help=", ".join(algorithm_names))
    attack.add_argument("--sites", type=int, default=2)
    attack.add_argument("--sites-names", help="comma-separated site names (overrides --sites)")
    attack.add_argument("--data-root", default=os.environ.get("VFLFLARE_DATA_ROOT"))
    attack.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="job settings, defenses among them (label_dp_epsilon, gradient_clip, gradient_noise, "
        "gradient_keep, gradient_marvell, representation_noise)",
    )
    attack.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    attack.add_argument(
        "--env",
        choices=("inprocess", "sim"),
        default="inprocess",
        help="sim: run the job in the NVFlare simulator, its coordinator recording what each party "
        "received, and attack that",
    )
    attack.add_argument(
        "--workspace", help="with --env sim: the job and simulator workspace (default: a new temporary folder)"
    )
    attack.set_defaults(func=_cmd_attack)

    bench = sub.add_parser("bench", help="every algorithm and baseline on a grid of splits; the leaderboard")
    if command in ("bench", None):  # its baselines import scikit-learn's models and XGBoost
        from vflflare.cli.bench import configure_bench_parser, run_bench

        configure_bench_parser(bench)
        bench.set_defaults(func=run_bench)

    keys = sub.add_parser(
        "he-keys",
        help="write CKKS contexts for a simulator run into WORKSPACE/startup/ (as NVFlare's HEBuilder makes them)",
    )
    keys.add_argument("-w", "--workspace", required=True, help="the workspace the simulator will run in")
    keys.add_argument("--force", action="store_true", help="replace existing contexts (default: keep them)")
    keys.set_defaults(func=_cmd_he_keys)

    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as error:  # a user reads what to fix; the traceback is for a developer (--debug)
        if args.debug:
            raise
        print(error_line(error), file=sys.stderr)
        return 1


def error_line(error: Exception) -> str:
    """What `vflflare` prints for an error instead of a traceback: bad input or settings (PartyError,
    ConfigError) in their own words; anything else, a likely bug, with the hint to look closer."""
    expected = isinstance(error, (PartyError, ConfigError))
    return f"error: {type(error).__name__}: {error}" + ("" if expected else " (--debug shows the traceback)")
