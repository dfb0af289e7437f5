"""The `vflflare bench` command: run the grid, then write the leaderboard (Markdown, CSV, plots);
`vflflare bench report DIR`: the leaderboard tables again, from DIR's results.jsonl alone (a committed
results file rebuilds its report's tables); `vflflare bench tables [--check]`: every report's marked tables
rebuilt from the committed records; `vflflare bench run SUITE`: the runs behind a report (bench/suites/)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vflflare.bench.grid import METHODS, BenchSpec, run_grid
from vflflare.bench.records import read_jsonl


def configure_bench_parser(parser: argparse.ArgumentParser) -> None:
    spec = BenchSpec()
    parser.add_argument("--datasets", nargs="+", default=spec.datasets, help="tables `vflflare split` knows")
    parser.add_argument("--overlaps", nargs="+", type=int, default=spec.overlaps, help="aligned labeled rows N_o")
    parser.add_argument("--seeds", nargs="+", type=int, default=spec.seeds)
    parser.add_argument(
        "--methods", nargs="+", default=spec.methods, metavar="METHOD", help=f"default: all of {list(METHODS)}"
    )
    parser.add_argument("--sites", type=int, default=spec.sites)
    parser.add_argument("--sim", action="store_true", help="run the VFL methods as NVFlare simulator jobs")
    parser.add_argument("--workers", type=int, default=spec.workers, help="splits run side by side in processes")
    parser.add_argument(
        "--data-dir",
        help="folder holding the dataset folders (default: $VFLFLARE_DATA_DIR; one of them is needed unless every "
        "dataset is built in: breast_cancer, synthetic)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a job setting for every VFL method that has it (e.g. split_epochs=5 for a quick run)",
    )
    parser.add_argument(
        "--ensemble",
        type=int,
        default=spec.ensemble,
        help="average each VFL method's test scores over this many job seeds (s, s + 1000, ...)",
    )
    parser.add_argument("--out", default="bench_out", help="results.jsonl, leaderboard.md/.csv and plots go here")
    parser.add_argument("--leaderboard", help="also write the Markdown table to this file")
    parser.add_argument("--table", action="store_true", help="only rebuild the leaderboard from --out's results")
    parser.add_argument(
        "--against",
        help="another bench's --out: also print the change in test AUC against it "
        "(seed by seed on the same splits), e.g. a setting against the default run",
    )
    # dests of its own: the bench's --out and --against defaults would otherwise stand in for them
    actions = parser.add_subparsers(dest="bench_action", metavar="report | tables | run | parity")
    report = actions.add_parser("report", help="the leaderboard tables from a folder's results.jsonl (no runs)")
    report.add_argument("results_dir", type=Path, help="a bench --out, or a committed benchmarks/results/<name>")
    report.add_argument(
        "--out", dest="report_out", type=Path, metavar="FILE", help="also write the Markdown to this file"
    )
    report.add_argument(
        "--against",
        dest="report_against",
        type=Path,
        metavar="DIR",
        help="another results folder: also the change in test AUC against it",
    )
    report.add_argument(
        "--paired",
        nargs=2,
        action="append",
        default=[],
        metavar=("METHOD", "OTHER"),
        help="also METHOD - OTHER seed by seed: median, seeds ahead, paired bootstrap 95 %% interval",
    )
    report.set_defaults(func=run_report)
    tables = actions.add_parser(
        "tables", help="rebuild every marked table of the reports (benchmarks/*.md, README, docs) from the records"
    )
    tables.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    tables.set_defaults(func=run_tables)
    run = actions.add_parser("run", help="run a suite: the runs behind a report (to a scratch folder by default)")
    run.add_argument("suite", nargs="?", help="a suite's name (--list: every suite)")
    run.add_argument("--list", dest="run_list", action="store_true", help="every suite, with its spec")
    where = run.add_mutually_exclusive_group()
    where.add_argument(
        "--out", dest="run_out", type=Path, metavar="PATH", help="the records path (default: a scratch folder)"
    )
    where.add_argument(
        "--committed", action="store_true", help="append to the suite's committed records under benchmarks/results"
    )
    run.add_argument(
        "--data-dir",
        dest="run_data_dir",
        type=Path,
        metavar="DIR",
        help="folder holding the dataset folders (default: $VFLFLARE_DATA_DIR; one of them is needed unless the "
        "suite's datasets are all built in)",
    )
    run.add_argument(
        "--methods", dest="run_methods", nargs="+", metavar="METHOD", help="a subset of the suite's methods"
    )
    run.add_argument(
        "--datasets", dest="run_datasets", nargs="+", metavar="DATASET", help="other datasets than the suite's"
    )
    run.add_argument(
        "--seeds", dest="run_seeds", nargs="+", type=int, metavar="SEED", help="other seeds than the suite's"
    )
    run.add_argument(
        "--set",
        dest="run_set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one of the suite's settings (--list names them); JSON values, e.g. overlaps=[1000]",
    )
    run.set_defaults(func=run_suite_command)
    parity = actions.add_parser("parity", help="compare two records files of the parity suite (before, after)")
    parity.add_argument("before", type=Path)
    parity.add_argument("after", type=Path)
    parity.set_defaults(func=run_parity)


def run_report(args: argparse.Namespace) -> int:
    from vflflare.bench.report import report_text

    text = report_text(args.results_dir, args.report_against, [tuple(p) for p in args.paired])
    if args.report_out:
        args.report_out.write_text(text)
    print(text)
    return 0


def run_tables(args: argparse.Namespace) -> int:
    from vflflare.bench.tables import rebuild_all

    lines, code = rebuild_all(args.check)
    print("\n".join(lines))
    return code


def run_suite_command(args: argparse.Namespace) -> int:
    from vflflare.bench.suite import describe, run_suite, suites
    from vflflare.cli import parse_overrides

    if args.run_list or not args.suite:
        print("\n".join(describe(spec) for _, spec in sorted(suites().items())))
        return 0
    path = run_suite(
        args.suite,
        args.run_out,
        args.committed,
        args.run_data_dir,
        args.run_methods,
        args.run_seeds,
        parse_overrides(args.run_set),
        args.run_datasets,
    )
    print(f"records: {path}")
    return 0


def run_parity(args: argparse.Namespace) -> int:
    from vflflare.bench.suites.parity import compare

    text, moved = compare(args.before, args.after)
    print(text, end="")
    return 1 if moved else 0


def run_bench(args: argparse.Namespace) -> int:
    from vflflare.bench.report import difference, markdown, plots, write_csv
    from vflflare.cli import parse_overrides

    out = Path(args.out).resolve()  # the simulator runs of the baselines work in other folders
    results = out / "results.jsonl"
    if not args.table:
        spec = BenchSpec(
            args.datasets,
            args.overlaps,
            args.seeds,
            args.methods,
            args.sites,
            args.sim,
            args.data_dir,
            args.workers,
            parse_overrides(args.set),
            args.ensemble,
        )
        run_grid(spec, out)
    records = read_jsonl(results)
    if not records:
        raise SystemExit(f"no results in {results}")
    table = markdown(records)
    (out / "leaderboard.md").write_text(table)
    if args.leaderboard:
        Path(args.leaderboard).write_text(table)
    write_csv(records, out / "leaderboard.csv")
    pngs = plots(records, out)
    print(table)
    if args.against:
        change = difference(records, read_jsonl(Path(args.against) / "results.jsonl"))
        (out / "against.md").write_text(change)
        print(change)
    print(
        f"records: {results}; table: {out / 'leaderboard.md'}; CSV: {out / 'leaderboard.csv'}; plots: "
        + ", ".join(map(str, pngs))
    )
    return 0
