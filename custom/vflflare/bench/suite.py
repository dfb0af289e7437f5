"""A suite: the runs behind one report or question, as a small spec (datasets, methods, seeds, settings) and
the function that runs it; `vflflare bench run NAME` executes it. Suites register as their modules under
suites/ load, beside the table builders of their report.

A run writes to a scratch folder (paths.SCRATCH/NAME) unless told otherwise: the committed records under
benchmarks/results change only when asked (`--committed`), so a trial run never mixes into a report's records.
It reads its datasets from `--data-dir`, else $VFLFLARE_DATA_DIR, and from no other path (paths.resolve_data_dir):
with neither, a suite that needs a data folder stops before its first run with an error naming both.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vflflare.bench.paths import COMMITTED, SCRATCH, needs_data_dir, resolve_data_dir


@dataclass(frozen=True)
class Suite:
    name: str
    about: str  # the question its report answers, in a line
    # (the spec as run, the records path, the data folder: None when the suite needs none and none was named)
    runner: Callable[[Suite, Path, Path | None], None]
    datasets: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    seeds: tuple[int, ...] = (0, 1, 2)
    settings: Mapping[str, Any] = field(default_factory=dict)  # the suite's own knobs; `--set` changes them
    more_methods: tuple[str, ...] = ()  # methods it runs only when named (--methods)
    records: str = ""  # its records under benchmarks/results: a .jsonl file or a folder
    # whether a run of this spec reads the data folder; default: unless every dataset is built in
    needs_data: Callable[[Suite], bool] | None = None

    def scratch(self) -> Path:
        """Where a run writes by default: a records path of the same shape as the committed one."""
        return SCRATCH / self.name / (Path(self.records).name if self.records else "records.jsonl")

    def committed(self) -> Path:
        if not self.records:
            raise ValueError(f"suite {self.name!r} has no committed records of its own: give --out")
        return COMMITTED / self.records

    def chosen(
        self,
        methods: list[str] | None = None,
        seeds: list[int] | None = None,
        settings: Mapping[str, Any] = (),
        datasets: list[str] | None = None,
    ) -> Suite:
        """The spec with a subset of its methods, other seeds or datasets, or changed settings (known ones)."""
        settings = dict(settings)
        unknown_methods = sorted(set(methods or ()) - set(self.methods) - set(self.more_methods))
        unknown_settings = sorted(set(settings) - set(self.settings))
        if unknown_methods or unknown_settings:
            raise ValueError(
                f"suite {self.name!r}: unknown methods {unknown_methods} or settings {unknown_settings}; "
                f"methods: {[*self.methods, *self.more_methods]}; settings: {sorted(self.settings)}"
            )
        return replace(
            self,
            datasets=tuple(datasets) if datasets else self.datasets,
            methods=tuple(methods) if methods else self.methods,
            seeds=tuple(seeds) if seeds else self.seeds,
            settings={**self.settings, **settings},
        )


SUITES: dict[str, Suite] = {}


def suite(spec: Suite) -> Suite:
    """Register `spec` under its name (once)."""
    if spec.name in SUITES:
        raise ValueError(f"suite {spec.name!r} is registered twice")
    SUITES[spec.name] = spec
    return spec


def suites() -> dict[str, Suite]:
    """Every registered suite, once every suite module has loaded."""
    from vflflare.bench import suites as modules

    modules.load()
    return SUITES


def run_suite(
    name: str,
    out: Path | None = None,
    committed: bool = False,
    data_dir: Path | None = None,
    methods: list[str] | None = None,
    seeds: list[int] | None = None,
    settings: Mapping[str, Any] = (),
    datasets: list[str] | None = None,
) -> Path:
    """Run suite `name` (its records to `out`, the committed path, or its scratch path); the records path."""
    known = suites()
    if name not in known:
        raise ValueError(f"unknown suite {name!r}; suites: {sorted(known)}")
    spec = known[name].chosen(methods, seeds, settings, datasets)
    path, folder = resolve_run(spec, out, committed, data_dir)
    spec.runner(spec, path, folder)
    return path


def resolve_run(
    spec: Suite, out: Path | None = None, committed: bool = False, data_dir: Path | None = None
) -> tuple[Path, Path | None]:
    """Where a run of `spec` writes (`out`, else the committed records with `committed`, else its scratch path)
    and the data folder it reads (--data-dir, else $VFLFLARE_DATA_DIR; an error naming both when the suite
    needs one and neither is set)."""
    if out is not None and committed:
        raise ValueError("give --out or --committed, not both")
    path = Path(out) if out is not None else spec.committed() if committed else spec.scratch()
    needed = spec.needs_data(spec) if spec.needs_data is not None else needs_data_dir(spec.datasets)
    return path, resolve_data_dir(data_dir, required=needed)


def describe(spec: Suite) -> str:
    """One suite as `vflflare bench run --list` shows it."""
    settings = json.dumps(dict(spec.settings), sort_keys=True)
    more = f" (when named: {list(spec.more_methods)})" if spec.more_methods else ""
    return (
        f"{spec.name}: {spec.about}\n  datasets {list(spec.datasets)}, seeds {list(spec.seeds)}, settings {settings}"
        f"\n  methods {list(spec.methods)}{more}\n  records: benchmarks/results/{spec.records or '(none of its own)'}"
    )
