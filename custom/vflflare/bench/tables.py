"""Every table in benchmarks/*.md (and the marked ones of the README and docs/*.md), rebuilt from the records
committed under benchmarks/results/ by the table builders the suites register (`vflflare bench tables`).

In a report, the line right before each table says where the table comes from:

    <!-- table NAME -->       the table builder NAME prints from its committed records (NAME N: its N-th table)
    <!-- table text -->       words only (cases, commands, file layouts, a paper's own numbers quoted): no number
                              measured by a run here
    <!-- table pending -->    a results table whose records are not committed yet; the lines after the
                              marker say how it was measured
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from vflflare.bench.paths import BENCHMARKS, REPO

MARKER = re.compile(r"^<!-- table (?P<name>[\w./-]+)(?: (?P<index>\d+))? -->$")
TEXT, PENDING = "text", "pending"

Builder = Callable[[], str]
BUILDERS: dict[str, Builder] = {}  # table name -> its builder (Markdown text holding one or more tables)


def register(name: str, build: Builder) -> Builder:
    """Name `build` as the source of the tables marked `<!-- table NAME -->`; a name is taken once."""
    if name in BUILDERS:
        raise ValueError(f"table {name!r} is registered twice")
    BUILDERS[name] = build
    return build


def table(name: str) -> Callable[[Builder], Builder]:
    """Decorator: `@table("NAME")` over a function of no arguments that returns the Markdown of NAME's tables."""
    return lambda build: register(name, build)


def builders() -> dict[str, Builder]:
    """Every registered builder, once every suite module has registered its own."""
    from vflflare.bench import suites

    suites.load()
    return BUILDERS


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


def rebuild(
    report: Path, built: dict[str, list[list[str]]], strict: bool = True, known: dict[str, Builder] | None = None
) -> tuple[str, list[str], list[str]]:
    """The report with every named table replaced by its rebuild; the tables that differed; the pending ones.
    In a report (strict) a table without a marker line is an error: nobody could tell where its numbers come
    from. The README's other tables are words; only its marked ones are results."""
    known = builders() if known is None else known
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
                built[name] = markdown_tables(known[name]())
            table = built[name][int(match["index"] or 1) - 1]
            if table != lines[i:end]:
                differ.append(f"{report.name}:{i + 1} ({name}{' ' + match['index'] if match['index'] else ''})")
            out.extend(table)
        i = end
    return "\n".join(out) + "\n", differ, pending


def reports() -> list[Path]:
    """Every file whose marked tables are rebuilt: the reports, the README and the docs."""
    return [*sorted(BENCHMARKS.glob("*.md")), REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def rebuild_all(check: bool) -> tuple[list[str], int]:
    """Rebuild every report's marked tables (check: change no file); the lines to print and the exit code
    (1 when checking and a table differs)."""
    known = builders()
    built: dict[str, list[list[str]]] = {}
    differ_all, pending_all = [], []
    for report in reports():
        text, differ, pending = rebuild(report, built, strict=report.parent == BENCHMARKS, known=known)
        differ_all += differ
        pending_all += pending
        if differ and not check:
            report.write_text(text)
    lines = [f"{'differs' if check else 'rewritten'}: {where}" for where in differ_all]
    lines.append(
        f"{len(built)} builders, {len(differ_all)} tables {'differ' if check else 'rewritten'}, "
        f"{len(pending_all)} pending: {', '.join(pending_all) or 'none'}"
    )
    return lines, 1 if check and differ_all else 0
