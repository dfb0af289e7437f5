"""`vflflare check-data`: every problem in a site's folder, or in a whole data root, at once and in seconds,
before any job runs (a job stops at the first problem, a simulator run later).

Each feature table (train.csv, test.csv, and score.csv when a site has new rows to score) is scanned row
by row for what a job would refuse (wrong field counts, empty or duplicate IDs, non-numeric or infinite
values, missing cells where the site's schema.json refuses them), up to MAX_EXAMPLES findings per column and
kind, with the count of the rest. Every numeric column then goes through the job's own preprocessing, cells
the scan refused left out, so a value it cannot standardise (1e300) is found beside any other problem of the
file. A folder found clean is then read by the job's own loader, so whatever else a job checks (schema,
labels, test columns) is checked too, and its score.csv as scoring reads it. For a data root, the parties'
IDs are matched as setup matches them (salted digests), with the same hint when normalising IDs would align
more rows; a root needs at least 2 sites (vertical FL: K >= 2).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vflflare.data.columnar import parquet_twin, table_path
from vflflare.data.errors import VALUE, DataError, site_owner
from vflflare.data.ids import normalizer
from vflflare.data.schema import SCHEMA_FILE, TableSchema, read_table_schema
from vflflare.data.table import MISSING_NUMBERS, _finite_float, _number_problem

MAX_EXAMPLES = 5  # findings shown per (file, column, kind); the rest are counted
SERVER = "server"
FEATURE_FILES = ("train.csv", "test.csv")
SCORE_FILE = "score.csv"  # a site's new rows to score (the scoring job's default score_file)
MIN_SITES = 2  # vertical FL: at least two parties hold columns of the same rows


@dataclass
class Findings:
    """Problems as a job would word them, capped per kind; `hidden` counts those beyond the cap."""

    messages: list[str] = field(default_factory=list)
    hidden: Counter = field(default_factory=Counter)
    _shown: Counter = field(default_factory=Counter)

    def add(self, kind: tuple, error: DataError) -> None:
        if self._shown[kind] < MAX_EXAMPLES:
            self._shown[kind] += 1
            self.messages.append(str(error))
        else:
            self.hidden[kind] += 1

    def lines(self) -> list[str]:
        more = [
            f"... and {n} more like the above ({kind[0]}{f', column {kind[1]!r}' if kind[1] else ''}: {kind[2]})"
            for kind, n in self.hidden.items()
        ]
        return self.messages + more

    @property
    def count(self) -> int:
        return len(self.messages) + sum(self.hidden.values())

    def __bool__(self) -> bool:
        return bool(self.messages)


@dataclass
class Numbers:
    """The numeric cells of one feature table as floats (NaN where the cell is missing or refused), with each
    row's line and ID: what the preprocessing check needs (check_ranges). Rows with a wrong field count are
    left out."""

    lines: array = field(default_factory=lambda: array("q"))
    ids: list[str] = field(default_factory=list)
    columns: dict[str, array] = field(default_factory=dict)


def scan_features(
    owner: str, path: Path, schema: TableSchema, findings: Findings, numbers: Numbers | None = None
) -> list[str] | None:
    """Every row-level problem of one feature table (train.csv / test.csv / score.csv) into `findings`; its
    header, or None when the file cannot be read at all. `numbers`: filled with its numeric cells."""
    if not path.is_file():
        findings.add((path.name, None, "missing"), DataError.at(owner, path, "file not found"))
        return None
    seen: dict[str, int] = {}
    header: list[str] | None = None
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            end = 0
            for record in reader:
                line, end = end + 1, reader.line_num
                if not record:
                    continue
                if header is None:
                    header = record
                    if not _header_ok(owner, path, header, line, schema, findings):
                        return None
                    at_id = header.index(schema.id_column)
                    kinds = _column_kinds(header, schema)
                    numeric = [i for i, kind in kinds.items() if kind == "number"] if numbers is not None else []
                    for i in numeric:
                        numbers.columns[header[i]] = array("d")
                    continue
                row_id = record[at_id] if at_id < len(record) else None
                if len(record) != len(header):
                    findings.add(
                        (path.name, None, "fields"),
                        DataError.at(
                            owner,
                            path,
                            f"{len(record)} fields but the header has {len(header)}",
                            line=line,
                            row_id=row_id,
                        ),
                    )
                    continue
                _check_id(owner, path, row_id, line, seen, findings, schema.id_column)
                if numbers is not None:
                    numbers.lines.append(line)
                    numbers.ids.append(row_id or "")
                    for i in numeric:
                        value = _finite_float(record[i])
                        numbers.columns[header[i]].append(math.nan if value is None else value)
                for position, kind in kinds.items():
                    problem = _cell_problem(record[position], kind, schema)
                    if problem:
                        findings.add(
                            (path.name, header[position], problem.split(" ")[0]),
                            DataError.at(
                                owner,
                                path,
                                problem,
                                line=line,
                                row_id=row_id,
                                column=header[position],
                                value=repr(record[position]),
                            ),
                        )
    except UnicodeDecodeError as error:
        findings.add((path.name, None, "encoding"), DataError.at(owner, path, f"not UTF-8 text: {error}"))
        return None
    except csv.Error as error:
        findings.add((path.name, None, "csv"), DataError.at(owner, path, f"malformed CSV: {error}"))
        return None
    if header is None:
        findings.add((path.name, None, "empty"), DataError.at(owner, path, "empty file; expected a header line"))
    return header


def _header_ok(owner: str, path: Path, header: list[str], line: int, schema: TableSchema, findings: Findings) -> bool:
    problems = [f"duplicate column names {sorted({n for n in header if header.count(n) > 1})} in the header"]
    problems = [p for p in problems if len(set(header)) != len(header)]
    if schema.id_column not in header:
        problems.append(f"missing ID column {schema.id_column!r}; the header has {header}")
    for name in schema.categorical_columns:
        if name not in header:
            problems.append(f"column {name!r} is declared categorical in schema.json but not in the header")
    for problem in problems:
        findings.add((path.name, None, problem), DataError.at(owner, path, problem, line=line))
    return not problems


def _column_kinds(header: list[str], schema: TableSchema) -> dict[int, str]:
    """Position -> "number" or "category" for the feature columns (not the ID or label column)."""
    skip = {schema.id_column, schema.label_column}
    return {
        i: "category" if name in schema.categorical_columns else "number"
        for i, name in enumerate(header)
        if name not in skip
    }


def _check_id(
    owner: str, path: Path, row_id: str | None, line: int, seen: dict[str, int], findings: Findings, column: str
) -> None:
    if not row_id:
        findings.add((path.name, column, "empty ID"), DataError.at(owner, path, "empty ID", line=line, column=column))
    elif row_id in seen:
        findings.add(
            (path.name, column, "duplicate ID"),
            DataError.at(
                owner,
                path,
                f"duplicate ID {VALUE}, first seen on line {seen[row_id]}",
                line=line,
                row_id=row_id,
                column=column,
                value=repr(row_id),
            ),
        )
    else:
        seen[row_id] = line


def _cell_problem(text: str, kind: str, schema: TableSchema) -> str | None:
    """What a job would refuse in this cell, or None."""
    if kind == "category":
        return "empty value in a categorical column" if text == "" and schema.missing.categorical == "error" else None
    if text.strip().lower() in MISSING_NUMBERS:
        return _number_problem(text, "") if schema.missing.numeric == "error" else None
    if _finite_float(text) is None:
        return _number_problem(text, " (if the column is categorical, list it in schema.json 'categorical_columns')")
    return None


def check_ranges(owner: str, schema: TableSchema, tables: dict[str, tuple[Path, Numbers]], findings: Findings) -> None:
    """What the job's preprocessing refuses in each numeric column, whatever else is wrong with the file:
    fitted on train.csv's column (a value too large to standardise), then applied to test.csv's and
    score.csv's (a value beyond float32 once scaled), as the loader and scoring do. The cells the scan
    refused are filled as missing ones; a column without one usable training value is left to the loader."""
    from vflflare.data.preprocess import STANDARD, Preprocessor
    from vflflare.data.table import CsvTable, FeatureTable

    if "train.csv" not in tables:
        return
    missing = schema.missing
    if missing.numeric == "error":  # refused cells are reported by the scan; fill them to check the rest
        missing = dataclasses.replace(missing, numeric="median")

    def table(path: Path, numbers: Numbers, name: str) -> FeatureTable:
        csv_table = CsvTable(owner, str(path), [schema.id_column, name], [], numbers.lines, numbers.ids)
        return FeatureTable(csv_table, {name: np.frombuffer(numbers.columns[name], dtype=np.float64).copy()}, [])

    train_path, train = tables["train.csv"]
    for name in train.columns:
        fitted = table(train_path, train, name)
        if not np.isfinite(fitted.columns[name]).any():
            continue
        try:
            preprocessor = Preprocessor.fit(
                fitted, numeric_transform=schema.numeric_transform or STANDARD, missing=missing
            )
            preprocessor.transform(fitted)
        except DataError as error:
            findings.add((train_path.name, name, "range"), error)
            continue
        for file, (path, numbers) in tables.items():
            if file != "train.csv" and name in numbers.columns:
                try:
                    preprocessor.transform(table(path, numbers, name))
                except DataError as error:
                    findings.add((path.name, name, "range"), error)


@dataclass
class PartyCheck:
    """One party's folder: its problems, and what its clean data holds (for the report)."""

    name: str
    findings: Findings
    summary: dict[str, Any] = field(default_factory=dict)
    ids: dict[str, list[str]] = field(default_factory=dict)  # "train"/"test" -> IDs, for the overlap


def check_site_folder(site: str, folder: Path, sites: list[str], data_root: str | None = None) -> PartyCheck:
    """A site's folder: scanned (its score.csv too, if any), then (if clean) read by the job's loader, and
    its score.csv as scoring reads it."""
    from vflflare.data.loading import DataRequest
    from vflflare.protocol.views import load_site_view

    owner, findings = site_owner(site), Findings()
    check = PartyCheck(site, findings)
    try:
        schema = read_table_schema(owner, folder / SCHEMA_FILE)
    except DataError as error:
        findings.add((SCHEMA_FILE, None, "schema"), error)
        return check
    try:
        tables_at = {name: table_path(owner, folder, name) for name in (*FEATURE_FILES, SCORE_FILE)}
    except DataError as error:  # both a CSV file and its Parquet twin
        findings.add(("files", None, "both"), error)
        return check
    score = tables_at[SCORE_FILE] if schema.modality == "table" and tables_at[SCORE_FILE].is_file() else None
    # Parquet files are checked by the job's loader alone, which stops at a file's first problem
    scanned = schema.modality == "table" and all(path.suffix == ".csv" for path in tables_at.values())
    if scanned:
        numbers = {name: Numbers() for name in (*FEATURE_FILES, *([SCORE_FILE] if score else []))}
        headers = {name: scan_features(owner, folder / name, schema, findings, numbers[name]) for name in numbers}
        train, test = headers["train.csv"], headers["test.csv"]
        if train and test and set(train) != set(test):
            findings.add(
                ("test.csv", None, "columns"),
                DataError.at(
                    owner,
                    folder / "test.csv",
                    f"columns differ from {folder / 'train.csv'}: missing "
                    f"{[n for n in train if n not in test]}, extra {[n for n in test if n not in train]}",
                ),
            )
        if train and headers.get(SCORE_FILE):
            trained = [n for n in train if n not in (schema.id_column, schema.label_column)]
            given = [n for n in headers[SCORE_FILE] if n != schema.id_column]
            if set(trained) != set(given):
                findings.add(
                    (SCORE_FILE, None, "columns"),
                    DataError.at(
                        owner,
                        score,
                        f"columns differ from the training columns of {folder / 'train.csv'}: missing "
                        f"{[n for n in trained if n not in given]}, extra {[n for n in given if n not in trained]} "
                        f"(scoring needs the ID column and exactly the columns the model was trained on)",
                    ),
                )
        check_ranges(
            owner, schema, {name: (folder / name, numbers[name]) for name in numbers if headers[name]}, findings
        )
    if findings:
        return check
    try:
        view = load_site_view(site, DataRequest(sites, data_root or str(folder.parent)))
    except DataError as error:
        findings.add(("loader", None, "loader"), error)
        return check
    tables = getattr(view, "tables", None)
    check.ids = {"train": list(view.train_ids), "test": list(view.test_ids)}
    check.summary = {
        "modality": schema.modality,
        "train_rows": len(view.train_ids),
        "test_rows": len(view.test_ids),
        "inputs": len(tables.feature_names) if tables is not None else None,
        "data_checks": tables.data_checks if tables is not None else {},
    }
    if score is not None and tables is not None and tables.site_input is not None:
        from vflflare.protocol.scoring import read_new_rows

        try:  # as the scoring job reads it, with this training data's preprocessing
            score_ids, _, score_checks = read_new_rows(site, score, tables.site_input)
        except DataError as error:
            findings.add((SCORE_FILE, None, "scoring"), error)
            return check
        check.summary.update(score_rows=len(score_ids), score_checks=score_checks)
    return check


def check_labels(owner_name: str, sites: list[str], data_root: str, id_normalize: list[str] = ()) -> PartyCheck:
    """The label party's files (the coordinator's `server/` or a label-owning site), read by the job's loader;
    the coordinator's list of IDs to score (score.csv), if any, as a scoring job reads it."""
    from vflflare.data.loading import DataRequest, load_label_tables
    from vflflare.protocol.scoring import read_score_ids

    findings = Findings()
    check = PartyCheck(f"labels at {owner_name}", findings)
    try:
        tables = load_label_tables(owner_name, DataRequest(sites, data_root))
    except DataError as error:
        findings.add(("labels", None, "labels"), error)
        return check
    check.ids = {"train": list(tables.train_ids), "test": list(tables.test_ids)}
    counts = sorted(Counter(tables.train_labels.tolist()).items())
    if tables.classes:  # the user's names for the classes (labels.json "classes")
        counts = [(tables.classes[int(c)], n) for c, n in counts]
    check.summary = {
        "num_classes": tables.num_classes,
        "train_labels": len(tables.train_ids),
        "test_labels": len(tables.test_ids),
        "per_class": dict(counts),
    }
    if owner_name == SERVER and table_path(owner_name, Path(data_root) / SERVER, SCORE_FILE).is_file():
        try:
            check.summary["score_ids"] = len(read_score_ids(Path(data_root) / SERVER, SCORE_FILE, id_normalize)[0])
        except DataError as error:
            findings.add(("score ids", None, "score ids"), error)
    return check


def _has_table(folder: Path, name: str) -> bool:
    """`folder` holds the table `name` (a .csv name), as CSV or as Parquet."""
    return (folder / name).is_file() or parquet_twin(folder / name).is_file()


def label_owners(root: Path, sites: list[str]) -> list[str]:
    """Where the labels are: `server/` if it holds label files, else every site whose folder does (one in
    a vertical split; every silo of a silo space holds its own)."""
    from vflflare.data.schema import LABELS_FILE

    if _has_table(root / SERVER, "train_labels.csv"):
        return [SERVER]

    def holds_labels(folder: Path, site: str) -> bool:
        if _has_table(folder, "train_labels.csv") or (folder / LABELS_FILE).is_file():
            return True
        try:
            return bool(read_table_schema(site_owner(site), folder / SCHEMA_FILE).label_column)
        except DataError:
            return False

    return [site for site in sites if holds_labels(root / site, site)]


def overlap(checks: list[PartyCheck], id_normalize: list[str]) -> dict[str, Any]:
    """The alignment report setup would print: rows per party that match every other party, by salted
    digest, and the normalisation hint."""
    from vflflare.protocol.alignment import hash_ids
    from vflflare.protocol.alignment_report import hash_report, id_variants
    from vflflare.protocol.setup import alignment_salt

    salt = alignment_salt(0)
    normalize = normalizer(id_normalize)
    train, test, variants = {}, {}, {}
    for check in checks:
        ids = {part: [normalize(i) for i in check.ids[part]] for part in ("train", "test")}
        train[check.name], test[check.name] = hash_ids(ids["train"], salt), hash_ids(ids["test"], salt)
        variants[check.name] = id_variants(ids["train"], ids["test"], salt, id_normalize)
    report, common_train, common_test = hash_report(train, test, variants)
    return {**report, "aligned_train": len(common_train), "aligned_test": len(common_test)}


def check_data(path: Path, id_normalize: list[str] = ()) -> tuple[list[PartyCheck], dict[str, Any] | None]:
    """Every party under a data root (or the one site folder `path` is), and the root's ID overlap."""
    from vflflare.protocol.topology import site_folders

    path = Path(path)
    if _has_table(path, "train.csv") or (path / SCHEMA_FILE).is_file() and not site_folders(path):
        return [check_site_folder(path.name, path, [])], None
    sites = site_folders(path)
    if not sites:
        raise DataError.at(
            "check-data", path, "neither a site folder (train.csv, test.csv) nor a data root (one folder per site)"
        )
    root_check = PartyCheck("data root", Findings())
    if len(sites) < MIN_SITES:
        root_check.findings.add(
            ("sites", None, "too few"),
            DataError.at(
                "check-data",
                path,
                f"only one site folder ({sites[0]!r}): vertical FL needs at least {MIN_SITES} sites, "
                f"each holding its own columns of the same rows; add the other parties' folders (to check this one "
                f"site's folder alone: vflflare check-data --data-root {path / sites[0]})",
            ),
        )
    checks = [check_site_folder(site, path / site, sites, str(path)) for site in sites]
    owners = label_owners(path, sites)
    if not owners:
        checks.append(PartyCheck("labels", Findings()))
        checks[-1].findings.add(
            ("labels", None, "none"),
            DataError.at(
                "check-data", path, f"no labels: neither {SERVER}/train_labels.csv nor a site folder holding labels"
            ),
        )
    checks += [check_labels(owner, sites, str(path), list(id_normalize)) for owner in owners]
    clean = [c for c in checks if c.ids]
    report = overlap(clean, list(id_normalize)) if len(clean) == len(checks) else None
    return ([root_check] if root_check.findings else []) + checks, report


def describe(checks: list[PartyCheck], report: dict[str, Any] | None) -> list[str]:
    """The lines `vflflare check-data` prints."""
    from vflflare.data.checks import describe_checks

    lines: list[str] = []
    for check in checks:
        if check.findings:
            lines += [f"{check.name}: {check.findings.count} problem(s)"]
            lines += [f"  {line}" for line in check.findings.lines()]
            continue
        s = check.summary
        if "train_rows" in s:
            what = f"{s['inputs']} model inputs" if s["inputs"] is not None else "images"
            scored = f", {s['score_rows']} score rows" if "score_rows" in s else ""
            lines.append(f"{check.name}: ok, {s['train_rows']} train rows, {s['test_rows']} test rows{scored}, {what}")
            lines += [f"  {line}" for line in describe_checks(site_owner(check.name), s["data_checks"])]
            lines += [f"  {line}" for line in describe_checks(site_owner(check.name), s.get("score_checks", {}))]
        elif s:
            lines.append(
                f"{check.name}: ok, {s['train_labels']} train labels (per class {s['per_class']}), "
                f"{s['test_labels']} test labels, {s['num_classes']} classes"
                + (f", {s['score_ids']} IDs to score" if "score_ids" in s else "")
            )
    if report is not None:
        lines.append(
            f"ID overlap (salted digests, as setup matches them): {report['aligned_train']} train rows and "
            f"{report['aligned_test']} test rows are at every party"
        )
        for party, counts in report["parties"].items():
            lines.append(
                f"  {party}: train {counts['train']['matched']} of {counts['train']['rows']} matched, "
                f"test {counts['test']['matched']} of {counts['test']['rows']}"
            )
        if report.get("hint"):
            lines.append(f"  hint: {report['hint']}")
    found = problems(checks)
    lines.append(f"{found} problem(s)" if found else "no problems found")
    return lines


def problems(checks: list[PartyCheck]) -> int:
    return sum(c.findings.count for c in checks)
