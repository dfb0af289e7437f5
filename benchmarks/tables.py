"""Every table in benchmarks/*.md (and the marked ones of the README and docs/*.md), rebuilt from the records
committed under benchmarks/results/.

In a report, the line right before each table says where the table comes from:

    <!-- table NAME -->       the table builder NAME prints from its committed records (NAME N: its N-th table)
    <!-- table text -->       words only (cases, commands, file layouts, a paper's own numbers quoted): no number
                              measured by a run here
    <!-- table pending -->    a results table whose records are not committed yet; the lines after the
                              marker say how it was measured

    .venv/bin/python benchmarks/tables.py            # rewrite every table from its records
    .venv/bin/python benchmarks/tables.py --check    # exit 1 naming each table that differs; list the pending
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
COMMITTED = HERE / "results"
for extra in (REPO / "custom", HERE):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

MARKER = re.compile(r"^<!-- table (?P<name>[\w./-]+)(?: (?P<index>\d+))? -->$")
TEXT, PENDING = "text", "pending"


def script(name: str) -> ModuleType:
    """A benchmark script as a module (its table functions and RESULTS path), without running it."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_report(folder: str, against: str | None = None, pairs: tuple[tuple[str, str], ...] = ()) -> Callable[[], str]:
    """`vflflare bench report benchmarks/results/FOLDER [--against ...] [--paired ...]`."""

    def build() -> str:
        from vflflare.bench.report import report_text

        return report_text(COMMITTED / folder, COMMITTED / against if against else None, list(pairs))

    return build


def parity(folder: str) -> Callable[[], str]:
    """`refactor_parity.py --compare FOLDER/before.jsonl FOLDER/after.jsonl`."""

    def build() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            script("refactor_parity").compare(COMMITTED / folder / "before.jsonl", COMMITTED / folder / "after.jsonl")
        return out.getvalue()

    return build


def parity_changes(folder: str) -> Callable[[], str]:
    """`refactor_parity.changes(FOLDER/before.jsonl, FOLDER/after.jsonl)`: a change meant to move numbers."""

    def build() -> str:
        return script("refactor_parity").changes(
            COMMITTED / folder / "before.jsonl", COMMITTED / folder / "after.jsonl"
        )

    return build


def script_text(name: str, function: str) -> Callable[[], str]:
    """`NAME.FUNCTION()`: tables a script builds from committed folders of its own choosing."""
    return lambda: getattr(script(name), function)()


def read_records(path: Path) -> list[dict]:
    from common import read_jsonl

    return read_jsonl(path)


def script_tables(name: str, function: str = "tables") -> Callable[[], str]:
    """`python benchmarks/NAME.py --table`: the script's own tables of its committed RESULTS file."""

    def build() -> str:
        module = script(name)
        return getattr(module, function)(read_records(module.RESULTS))

    return build


def sessions(name: str) -> list[str]:
    """The sessions recorded in a committed results file (one table each)."""
    path = COMMITTED / name
    return list(dict.fromkeys(r["session"] for r in read_records(path))) if path.is_file() else []


def fedhssl(function: str, *files: str, **kwargs) -> Callable[[], str]:
    """`fedhssl.FUNCTION(records of FILES..., **kwargs)`: one FEDHSSL_REPORT table."""
    return lambda: getattr(script("fedhssl"), function)(*(read_records(COMMITTED / f) for f in files), **kwargs)


FEDHSSL_TABLES = {  # name: (builder, the committed files it reads)
    "fedhssl/credit_200": (
        fedhssl("method_table", "fedhssl_g10.jsonl", setting="credit_default", labeled=200),
        ["fedhssl_g10.jsonl"],
    ),
    "fedhssl/credit_400": (
        fedhssl("method_table", "fedhssl_g10.jsonl", setting="credit_default", labeled=400),
        ["fedhssl_g10.jsonl"],
    ),
    "fedhssl/adult_200": (
        fedhssl("method_table", "fedhssl_g10.jsonl", setting="adult", labeled=200),
        ["fedhssl_g10.jsonl"],
    ),
    "fedhssl/communication": (fedhssl("communication_table", "fedhssl_g10.jsonl"), ["fedhssl_g10.jsonl"]),
    "fedhssl/grid": (
        fedhssl("grid_table", "fedhssl_g10.jsonl", cells=[("credit_default", 1000), ("adult", 400), ("adult", 1000)]),
        ["fedhssl_g10.jsonl"],
    ),
    "fedhssl/mnist": (
        fedhssl("grid_table", "fedhssl_mnist.jsonl", cells=[("mnist:2", 200), ("mnist:4", 200)]),
        ["fedhssl_mnist.jsonl"],
    ),
    "fedhssl/summary": (
        fedhssl("summary_table", "fedhssl_g10.jsonl", "fedhssl_mnist.jsonl"),
        ["fedhssl_g10.jsonl", "fedhssl_mnist.jsonl"],
    ),
    "fedhssl/iterations": (
        fedhssl("iterations_table", "fedhssl_g40.jsonl", "fedhssl_g10.jsonl"),
        ["fedhssl_g40.jsonl", "fedhssl_g10.jsonl"],
    ),
    "fedhssl/probe": (fedhssl("probe_table", "fedhssl_probe.jsonl"), ["fedhssl_probe.jsonl"]),
    **{
        f"fedhssl/privacy_{n}": (
            (
                lambda n=n: getattr(script("fedhssl_privacy"), f"table_{n}")(
                    read_records(COMMITTED / "fedhssl_privacy.jsonl")
                )
            ),
            ["fedhssl_privacy.jsonl"],
        )
        for n in ("vi", "vii")
    },
}
FAIR = "leaderboard/fair_trees"
TUNED, ALONE_TUNED = "central XGBoost, tuned", "label party alone (XGBoost, all its labels), tuned"
BUILDERS: dict[str, Callable[[], str]] = {
    "leaderboard/grid_credit_default": bench_report("leaderboard/grid_credit_default"),
    "leaderboard/grid_adult": bench_report("leaderboard/grid_adult"),
    "leaderboard/default": bench_report("leaderboard/default"),
    "leaderboard/ple_ensemble3": bench_report("leaderboard/ple_ensemble3", "leaderboard/default"),
    **{
        f"leaderboard/{change}_{dataset}": bench_report(
            f"leaderboard/{change}_{dataset}", f"leaderboard/grid_{dataset}"
        )
        for change in ("quantile", "mlp128x2", "ple", "ensemble3", "wd1e-4", "ple_ensemble3")
        for dataset in ("credit_default", "adult")
        if (COMMITTED / "leaderboard" / f"{change}_{dataset}").is_dir()
    },
    "leaderboard/changes": script_text("leaderboard_changes", "tables"),
    "leaderboard/fair_trees": bench_report(
        FAIR, pairs=(("VFLHLP", TUNED), ("VFLHLP", ALONE_TUNED), ("SS-VFL-I", TUNED), ("VFLHLP", "central XGBoost"))
    ),
    "parity/issue9": parity("issue9_parity"),
    "parity/issue25": parity("issue25_parity"),
    "parity/issue27": parity("issue27_parity"),
    "parity/issue28": parity("issue28_parity"),
    "parity/issue29": parity("issue29_parity"),
    "parity/issue29_split": parity("issue29_split_parity"),
    "parity/issue36": parity("issue36_parity"),
    "parity/issue37": parity("issue37_parity"),
    "parity/stratified": parity_changes("stratified_validation"),
    "collab": script_tables("collab_vs_aux", "table"),
    "ssvfl": script_tables("ssvfl"),
    "cfl": script_tables("cfl"),
    "credit_default": script_tables("credit_default"),
    "imbalance": script_tables("imbalance", "table"),
    "overhead": script_tables("overhead"),
    "label_disclosure": script_tables("label_disclosure"),
    "privacy": script_tables("privacy"),  # credit default, the adaptive suite (issue 36): privacy_adaptive.jsonl
    "privacy_mnist": lambda: script("privacy").mnist_table(read_records(COMMITTED / "privacy_mnist_adaptive.jsonl")),
    **({"wan": script_tables("wan")} if (COMMITTED / "wan.jsonl").is_file() else {}),
    **{
        f"poc_step_latency/{session}": (
            lambda session=session: script("poc_step_latency").table(
                read_records(COMMITTED / "poc_step_latency.jsonl"), session
            )
        )
        for session in sessions("poc_step_latency.jsonl")
    },
    **({"scale_memory": script_tables("scale_memory")} if (COMMITTED / "scale_memory.jsonl").is_file() else {}),
    **(
        {"he_overhead": script_tables("he_overhead", "summary_tables")}
        if (COMMITTED / "he_overhead.jsonl").is_file()
        else {}
    ),
    **{
        f"performance/{part}": script_text("performance", f"{part}_table")
        for part in ("wire", "pipeline", "pipeline_wan", "imports", "image_views", "overhead", "fedhssl")
        if (COMMITTED / "performance" / f"{part}.jsonl").is_file()
    },
    "performance/mnist_simulator": script_text("performance", "mnist_simulator_table"),
    **{
        name: script_tables(name)
        for name, records in (("vflhlp", "vflhlp.jsonl"), ("images", "images_cpu.jsonl"))
        if (COMMITTED / records).is_file()
    },
    **{name: build for name, (build, files) in FEDHSSL_TABLES.items() if all((COMMITTED / f).is_file() for f in files)},
    "images_mnist_all": script_text("images_simulator", "headline_table"),
    **(
        {"images_cifar_all": script_text("images_simulator", "cifar_table")}
        if (COMMITTED / "images_cifar_all.jsonl").is_file()
        else {}
    ),
    **{
        f"images/{name}": (lambda name=name: script("images_simulator").committed_table(name))
        for name in ("images_small", "images_k4")
        if (COMMITTED / f"{name}.jsonl").is_file()
    },
}


def markdown_tables(text: str) -> list[list[str]]:
    """The tables of a Markdown text, each as its lines, in order."""
    tables: list[list[str]] = []
    previous = False
    for line in text.splitlines():
        if line.startswith("|"):
            if not previous:
                tables.append([])
            tables[-1].append(line)
        previous = line.startswith("|")
    return tables


def rebuild(report: Path, built: dict[str, list[list[str]]], strict: bool = True) -> tuple[str, list[str], list[str]]:
    """The report with every named table replaced by its rebuild; the tables that differed; the pending ones.
    In a report (strict) a table without a marker line is an error: nobody could tell where its numbers come
    from. The README's other tables are words; only its marked ones are results."""
    lines, out, differ, pending = report.read_text().splitlines(), [], [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|") and strict:
            raise ValueError(f"{report.name}:{i + 1}: a table without a '<!-- table ... -->' line before it")
        out.append(line)
        i += 1
        match = MARKER.match(line)
        if not match:
            continue
        end = i
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        if end == i:
            raise ValueError(f"{report.name}:{i}: '{line}' is not followed by a table")
        name = match["name"]
        if name == PENDING:
            pending.append(f"{report.name}:{i + 1}")
        if name in (TEXT, PENDING):
            out.extend(lines[i:end])
        else:
            if name not in built:
                built[name] = markdown_tables(BUILDERS[name]())
            table = built[name][int(match["index"] or 1) - 1]
            if table != lines[i:end]:
                differ.append(f"{report.name}:{i + 1} ({name}{' ' + match['index'] if match['index'] else ''})")
            out.extend(table)
        i = end
    return "\n".join(out) + "\n", differ, pending


def reports() -> list[Path]:
    """Every file whose marked tables are rebuilt: the reports, the README and the docs."""
    return [*sorted(HERE.glob("*.md")), REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    args = parser.parse_args(argv)
    built: dict[str, list[list[str]]] = {}
    differ_all, pending_all = [], []
    for report in reports():
        text, differ, pending = rebuild(report, built, strict=report.parent == HERE)
        differ_all += differ
        pending_all += pending
        if differ and not args.check:
            report.write_text(text)
    for where in differ_all:
        print(f"{'differs' if args.check else 'rewritten'}: {where}")
    print(
        f"{len(built)} builders, {len(differ_all)} tables {'differ' if args.check else 'rewritten'}, "
        f"{len(pending_all)} pending: {', '.join(pending_all) or 'none'}"
    )
    return 1 if args.check and differ_all else 0


if __name__ == "__main__":
    sys.exit(main())
