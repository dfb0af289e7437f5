"""What a site checks of the rows it feeds its model against its training rows: the test table of a
training job and the file of a scoring job (issue 25).

Preprocessing is fitted on the training rows only (preprocess.py); rows that training never saw the like
of are scored anyway, and would silently wreck the scores. So a site reports, by column:

- constant columns: one value in every training row. Standardising one used to divide by a scale of 1,
  so a test value of 1500 went into the model as 1500. Now the column is a fixed 0 input at training,
  test and scoring time (it carries no information in training, so the model cannot use it); the input
  width is kept, so models and saved preprocessing keep their shapes;
- out-of-range columns: more than OUTSIDE_SHARE of the rows outside the training [min, max];
- clipped values: every numeric value is clipped to the training [min, max] widened by CLIP_RANGES
  training ranges on each side (`clip_bounds`) before any numeric_transform, and every column with a
  clipped value is reported. Why raw units and 3 ranges: the bound must never touch a training row (it
  contains them by construction), must leave clean data alone (on credit default, 2 sites, N_o 1000,
  seeds 0-2, the furthest test value lies 0.88 training ranges beyond its column's training range, so 3
  ranges leave a margin of 3x; no clean value is clipped, and the metrics are bit-identical), and the
  same bound serves every transform. A constant column's range is 0, so its bound is its one value:
  every row becomes the training value, hence the fixed 0 input;
- unseen categories: categorical values training never saw (the unknown index / all-zero one-hot);
- missing cells, per column, filled as the site's schema.json `missing` says (preprocess.py): in the
  checked rows, and in the training rows (`train_missing`, added by the loader).

What may cross to the coordinator (`public_checks`): column names, counts and shares, line numbers.
The values and the training ranges (`SITE_ONLY` keys) stay in the site's own log (`describe_checks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.data.table import MISSING_CATEGORY, FeatureTable

# report a column when more than 5 % of its rows lie outside the training range. A row drawn like the
# n training rows lies outside their range with probability 2 / (n + 1): 0.7 % for the 288 training rows
# of the embedded breast-cancer split, whose clean test file a 1 % threshold flagged.
OUTSIDE_SHARE = 0.05
CLIP_RANGES = 3.0  # clip to the training [min, max] widened by this many training ranges on each side
SITE_ONLY = ("first_value", "range")  # row values and the site's statistics: for the site's own log only


def clip_bounds(low: float, high: float) -> tuple[float, float]:
    """Where a column's values are clipped, from its training (min, max); (c, c) for a constant column."""
    width = CLIP_RANGES * (high - low)
    return low - width, high + width


def clip(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """`values` clipped to `clip_bounds(low, high)`; the values inside come back bit for bit."""
    return np.clip(values, *clip_bounds(low, high))


def constant_columns(ranges: Mapping[str, tuple[float, float]]) -> list[str]:
    """The numeric columns with one value in every training row (min == max)."""
    return [name for name, (low, high) in ranges.items() if low == high]


def _first(table: FeatureTable, name: str, rows: np.ndarray) -> dict[str, Any]:
    """Line and value of the first of `rows` of column `name`, for the site's log."""
    first = int(rows[0])
    value = table.columns[name][first]
    return {"first_line": table.csv.lines[first], "first_value": value if isinstance(value, str) else float(value)}


def _outside(table: FeatureTable, name: str, values: np.ndarray, low: float, high: float) -> dict[str, Any] | None:
    """A numeric column's finding when more than OUTSIDE_SHARE of its rows lie outside the training range
    [low, high], or any value is clipped: how many rows lie outside, their share, how many are clipped, and the
    first (a clipped one if any)."""
    outside = np.flatnonzero((values < low) | (values > high))
    bound_low, bound_high = clip_bounds(low, high)
    clipped = np.flatnonzero((values < bound_low) | (values > bound_high))
    share = len(outside) / max(len(values), 1)
    if share <= OUTSIDE_SHARE and not len(clipped):
        return None
    return {
        "rows": int(len(outside)),
        "share": share,
        "clipped": int(len(clipped)),
        "range": [low, high],
        **_first(table, name, clipped if len(clipped) else outside),
    }


def out_of_range(table: FeatureTable, ranges: Mapping[str, tuple[float, float]]) -> dict[str, dict[str, Any]]:
    """Per numeric column (`ranges`: column -> training (min, max)), its finding (`_outside`), if any."""
    found = {name: _outside(table, name, table.columns[name], *bounds) for name, bounds in ranges.items()}
    return {name: entry for name, entry in found.items() if entry is not None}


class RowChecks:
    """check_rows's checks of `table`, gathered one column at a time (`column`), so that they can ride along
    the pass that preprocesses the columns (Preprocessor.transform's `inspect`): a column read from Parquet
    while it is used is then read once, not once per check. `ranges`: numeric column -> training (min, max);
    `categories`: categorical column -> training categories (empty: missing cells only, as of training rows)."""

    def __init__(
        self,
        table: FeatureTable,
        ranges: Mapping[str, tuple[float, float]],
        categories: Mapping[str, list[str]],
    ) -> None:
        self.table, self.ranges, self.categories = table, ranges, categories
        self._order = list(table.columns)  # file order: the pass may release the columns as it goes
        self._outside: dict[str, dict[str, Any]] = {}
        self._unseen: dict[str, dict[str, Any]] = {}
        self._missing: dict[str, int] = {}

    def column(self, name: str, values: np.ndarray) -> None:
        if name in self.table.categorical:
            missing = int(np.sum(values == MISSING_CATEGORY))
            if name in self.categories:
                unseen = np.flatnonzero(~np.isin(values, np.asarray(self.categories[name], dtype=object)))
                if len(unseen):
                    self._unseen[name] = {"rows": int(len(unseen)), **_first(self.table, name, unseen)}
        else:
            missing = int(np.isnan(values).sum())
            entry = _outside(self.table, name, values, *self.ranges[name]) if name in self.ranges else None
            if entry is not None:
                self._outside[name] = entry
        if missing:
            self._missing[name] = missing

    @property
    def missing(self) -> dict[str, int]:
        """Per column with missing cells (NaN numbers, the missing category), how many rows, in file order."""
        return {name: self._missing[name] for name in self._order if name in self._missing}

    def result(self) -> dict[str, Any]:
        """The checks, in the order of their columns: training's (ranges), then the file's."""
        return {
            "file": Path(self.table.csv.source).name,
            "rows": self.table.csv.num_rows,
            "constant_columns": constant_columns(self.ranges),
            "out_of_range": {name: self._outside[name] for name in self.ranges if name in self._outside},
            "unseen_categories": {name: self._unseen[name] for name in self._order if name in self._unseen},
            "missing": self.missing,
        }


def check_rows(
    table: FeatureTable, ranges: Mapping[str, tuple[float, float]], categories: Mapping[str, list[str]]
) -> dict[str, Any]:
    """Every check of `table` (test or scoring rows) against the training statistics: `ranges` (numeric
    column -> training (min, max)) and `categories` (categorical column -> training categories)."""
    checks = RowChecks(table, ranges, categories)
    for name, values in table.columns.items():
        checks.column(name, values)
    return checks.result()


def has_findings(checks: Mapping[str, Any]) -> bool:
    """Whether `checks` found anything to report (clean data sends and prints nothing)."""
    return bool(checks) and any(
        checks.get(key) for key in ("constant_columns", "out_of_range", "unseen_categories", "missing", "train_missing")
    )


def public_checks(checks: Mapping[str, Any]) -> dict[str, Any]:
    """`checks` without row values or training statistics: what may cross to the coordinator."""

    def strip(per_column: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        return {name: {k: v for k, v in entry.items() if k not in SITE_ONLY} for name, entry in per_column.items()}

    return {
        **checks,
        "out_of_range": strip(checks["out_of_range"]),
        "unseen_categories": strip(checks["unseen_categories"]),
    }


def describe_checks(owner: str, checks: Mapping[str, Any]) -> list[str]:
    """One line per finding. From the site's own `checks` the lines show values and ranges (its log);
    from `public_checks` only counts (the coordinator's log and the printed report)."""
    if not checks:  # nothing was checked (an image site)
        return []
    file, total = checks["file"], checks["rows"]
    lines = [
        f"{owner}: column {name!r} holds one value in every training row: it carries no information and is "
        f"fed as a fixed 0 in training, test and scoring"
        for name in checks["constant_columns"]
    ]
    for name, entry in checks["out_of_range"].items():
        where = f" [{entry['range'][0]:g}, {entry['range'][1]:g}]" if "range" in entry else ""
        line = (
            f"{owner}: {file}: column {name!r}: {entry['rows']} of {total} rows ({entry['share']:.1%}) outside "
            f"the training range{where}"
        )
        if entry["clipped"]:
            line += f"; {entry['clipped']} far outside, clipped to {CLIP_RANGES:g} training ranges beyond it"
        lines.append(line + _first_text(entry))
    lines += [
        f"{owner}: {file}: column {name!r}: {entry['rows']} of {total} rows with a category training never saw, "
        f"fed as unknown" + _first_text(entry)
        for name, entry in checks["unseen_categories"].items()
    ]
    for key, where in (("train_missing", "the training rows"), ("missing", file)):
        columns = checks.get(key, {})
        if columns:  # one line per file: a table with blanks everywhere would fill a screen otherwise
            cells = ", ".join(f"{name!r} {count}" for name, count in columns.items())
            lines.append(
                f"{owner}: {where}: {sum(columns.values())} missing cells in {len(columns)} column"
                f"{'s' if len(columns) > 1 else ''}, filled as schema.json 'missing' says ({cells})"
            )
    return lines


def _first_text(entry: Mapping[str, Any]) -> str:
    value = f", {entry['first_value']!r}" if "first_value" in entry else ""
    return f" (first: line {entry['first_line']}{value})"


def collect_checks(report: dict[str, Any], replies: Mapping[str, Mapping[str, Any]], sites: list[str]) -> None:
    """The coordinator's side: the public checks of the sites that sent some in their setup reply (those
    that found something) go into the job's report under "data_checks", by site; none, no key."""
    found = {site: dict(replies[site]["data_checks"]) for site in sites if "data_checks" in replies[site]}
    if found:
        report["data_checks"] = found
