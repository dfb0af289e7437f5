"""What alignment kept and left out, per party: the record every run prints before training.

The coordinator sees counts only (salted digests, or PSI sizes). The IDs a party could not match
stay at that party: each party logs up to `EXAMPLES` of its own unmatched IDs (`describe_unmatched`)
and sends on only counts. A test row or test label without partner fails the job (unless it sets
``allow_partial_test``), naming first the party that lacks rows every other party has
(`lacking_counts`): a missing test label is the label party's to fix, not the sites'. Unmatched
*training* rows are normal in few-overlap VFL (they are each site's unlabeled rows) and only
reported; ``min_aligned`` guards against training on a sliver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from vflflare.data.checks import describe_checks
from vflflare.data.ids import ID_NORMALIZATIONS, changing_steps, might_change, normalizer
from vflflare.data.schema import TEST_FILE, TEST_LABELS_FILE, TRAIN_FILE, TRAIN_LABELS_FILE
from vflflare.data.types import LabelTables
from vflflare.protocol.alignment import AlignmentError, hash_ids, unmatched_positions

EXAMPLES = 5
PARTS = ("train", "test")


def party_counts(digests: Mapping[str, Sequence[str]], common: set[str]) -> dict[str, dict[str, int]]:
    return {p: {"rows": len(d), "matched": len(d) - len(unmatched_positions(d, common))} for p, d in digests.items()}


def with_variants(digests: Sequence[str], variants: Mapping | None, part: str) -> list[str]:
    """A party's digests with those of its normalised IDs swapped in (`variants`: positions and digests
    of the IDs that full normalisation would change)."""
    out = list(digests)
    if variants:
        for position, digest in zip(np.asarray(variants[f"{part}_pos"]).tolist(), variants[part]):
            out[position] = digest
    return out


def normalization_hint(
    train: Mapping[str, Sequence[str]],
    test: Mapping[str, Sequence[str]],
    variants: Mapping[str, Mapping | None],
    matched: tuple[int, int],
) -> str | None:
    """How many more rows would align if every party normalised its IDs, and with which steps; None
    when normalising would not help."""
    steps = sorted({s for v in variants.values() if v for s in v["steps"]})
    if not steps:
        return None
    gains = []
    for part, digests, before in (("train", train, matched[0]), ("test", test, matched[1])):
        after = set.intersection(*(set(with_variants(d, variants.get(p), part)) for p, d in digests.items()))
        gains.append(len(after) - before)
    if max(gains) <= 0:
        return None
    return (
        f"{gains[0]} more train and {gains[1]} more test rows would align with id_normalize: {steps} "
        f"(IDs that differ only in those ways)"
    )


def check_shared(report: Mapping) -> None:
    """No row shared by every party: name each party's row count and, when a normalisation would match
    rows, the id_normalize hint, since differently written IDs are the usual cause."""
    hint = f"; hint: {report['hint']}" if report.get("hint") else ""
    for part, rows in (("train", "training rows"), ("test", "test rows")):
        if min(parts[part]["matched"] for parts in report["parties"].values()) == 0:
            sizes = ", ".join(f"{p} {parts[part]['rows']}" for p, parts in report["parties"].items())
            raise AlignmentError(f"the parties share no {rows} ({part} rows per party: {sizes}){hint}")


def check_min_aligned(aligned: int, min_aligned: float, report: Mapping, sites: Sequence[str]) -> None:
    """min_aligned below 1 is a fraction of the smallest site's training rows, from 1 on a row count."""
    if min_aligned <= 0:
        return
    smallest = min(report["parties"][s]["train"]["rows"] for s in sites)
    needed = int(np.ceil(min_aligned * smallest)) if min_aligned < 1 else int(min_aligned)
    if aligned < needed:
        what = f"{min_aligned:g} of the smallest site's {smallest} training rows" if min_aligned < 1 else "rows"
        raise AlignmentError(
            f"only {aligned} training rows align across all parties, min_aligned asks for {needed} "
            f"({what}); alignment report:\n{format_report(report)}"
        )


def summarize(unmatched: Mapping[str, Sequence[int]]) -> dict[str, dict]:
    """Per part, the count of a party's unmatched rows and the positions of the first `EXAMPLES`: all a
    party needs for its log (sending every position would cost 8 bytes per unaligned row)."""
    return {
        part: {"first": np.asarray(positions[:EXAMPLES], dtype=np.int64), "count": len(positions)}
        for part, positions in unmatched.items()
    }


def withheld(owner: str) -> str:
    """What a problem that leaves a party says in place of the IDs it leaves out: where they are."""
    return f"the IDs are in the log of {owner}"


def _unmatched(owner: str, file: str, count: int, total: int, what: str) -> str:
    return f"{owner}: {file}: {count} of {total} {what} have no partner at every other party"


def describe_unmatched(owner: str, file: str, ids: Sequence[str], unmatched: Mapping, what: str) -> str:
    """For the party's own log only: it names the first unmatched IDs."""
    examples = [ids[int(i)] for i in unmatched["first"]]
    return _unmatched(owner, file, int(unmatched["count"]), len(ids), what) + f", e.g. IDs {examples}"


def _problem(full: str, public: str, allowed: bool, log: Callable[[str], None]) -> list[str]:
    """A test-row problem: the full text goes to the party's own log; the public one (no IDs) is returned
    for the coordinator to fail the job with every party's problems at once, unless the job allows it."""
    if allowed:
        log(full + "; left out of scoring (allow_partial_test)")
        return []
    log(full)
    return [public]


def partial_test(
    owner: str, file: str, ids: Sequence[str], unmatched: Mapping, allowed: bool, log: Callable[[str], None]
) -> list[str]:
    """A test row or test label with no partner would silently go unscored. When no test row matches at
    all, the coordinator's "share no test rows" error says it better."""
    if not unmatched["count"] or unmatched["count"] == len(ids):
        return []
    public = _unmatched(owner, file, int(unmatched["count"]), len(ids), "test rows") + f" ({withheld(owner)})"
    return _problem(describe_unmatched(owner, file, ids, unmatched, "test rows"), public, allowed, log)


def unlabeled_test(
    who: str, file: str, unlabeled: Sequence[str] | int, n_test: int, allowed: bool, log: Callable[[str], None]
) -> list[str]:
    """Test rows every site shares but the label party has no label for (`unlabeled`: their IDs where
    the label party knows them, else their number) would go unscored, like `partial_test`."""
    count = unlabeled if isinstance(unlabeled, int) else len(unlabeled)
    if not count:
        return []
    text = f"{who}: {file}: {count} of the {n_test} test rows the sites share have no test label"
    if isinstance(unlabeled, int):
        return _problem(text, text, allowed, log)
    return _problem(f"{text}, e.g. IDs {list(unlabeled)[:EXAMPLES]}", f"{text} ({withheld(who)})", allowed, log)


def lacking_counts(digests: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Per party, how many rows every other party has and it lacks: the party to name first when rows
    have no partner (100 test labels missing at the label party strand 100 test rows at every site)."""
    held = {p: set(d) for p, d in digests.items()}
    return {p: len(set.intersection(*(h for q, h in held.items() if q != p)) - held[p]) for p in held}


def lacking_test(owner: str, file: str, lacking: int, allowed: bool, log: Callable[[str], None]) -> list[str]:
    """The problem of a party whose test file lacks rows every other party has (a count: no IDs)."""
    if not lacking:
        return []
    text = f"{owner}: {file} lacks {lacking} test rows that every other party has"
    return _problem(text, text, allowed, log)


def test_labels_source(labels: LabelTables) -> str:
    """Where a label party's test labels were read: LabelTables records only the training labels' source,
    and the test labels sit beside them (test_labels.csv, or the label column of test.csv; or Parquet)."""
    for train, test in ((TRAIN_LABELS_FILE, TEST_LABELS_FILE), (TRAIN_FILE, TEST_FILE)):
        for suffix in (".csv", ".parquet"):
            train_name, test_name = Path(train).with_suffix(suffix).name, Path(test).with_suffix(suffix).name
            if labels.train_source.endswith(train_name):
                return labels.train_source[: -len(train_name)] + test_name
    return "test labels"


def raise_partial_test(problems: Sequence[str], hint: str | None = None) -> None:
    if problems:
        tail = f"\nhint: {hint}" if hint else ""
        raise AlignmentError(
            "\n".join(problems) + "\nevery party's test file must hold the same IDs (set "
            "allow_partial_test: true to score only the shared rows)" + tail
        )


def progress_line(report: Mapping) -> str:
    """What a run logs when it has aligned: the full report when there is a hint or a data check to read,
    else one line (the results table lists every party's matches; a line is printed once)."""
    if report.get("hint"):
        return "alignment:\n" + format_report(report)
    notes = sum(len(describe_checks(f"site {site!r}", c)) for site, c in report.get("data_checks", {}).items())
    counts = [f"{k} {report[k]}" for k in ("aligned_train", "val", "test") if k in report]
    matched = ", ".join(
        f"{party} {parts['train']['matched']}/{parts['train']['rows']}"
        for party, parts in report["parties"].items()
        if "train" in parts
    )
    noted = f"; {notes} data note{'s' if notes > 1 else ''} in the results table" if notes else ""
    return (
        f"alignment: {', '.join(counts)} (train rows matched: {matched}){noted}"
        if counts
        else f"alignment: train rows matched per party: {matched}{noted}"
    )


def format_report(report: Mapping) -> str:
    lines = []
    for party, parts in report["parties"].items():
        cells = [f"{part} {c['matched']}/{c['rows']} matched" for part, c in parts.items()]
        lines.append(f"  {party:<24} " + ", ".join(cells))
    counts = [f"{k} {report[k]}" for k in ("aligned_train", "val", "test") if k in report]
    if counts:  # a report before the split into train, val and test has none
        lines.append("  aligned: " + ", ".join(counts))
    if report.get("hint"):
        lines.append(f"  hint: {report['hint']}")
    for site, checks in report.get("data_checks", {}).items():  # each site's test rows against its training rows
        lines += [f"  {line}" for line in describe_checks(f"site {site!r}", checks)]
    return "\n".join(lines)


def id_variants(train_ids: Sequence[str], test_ids: Sequence[str], salt: str, applied: Sequence[str]) -> dict | None:
    """A party's side of the normalisation hint: the salted digests of its IDs under every
    normalisation step, for the IDs that change (usually none, so clean data sends nothing more)."""
    changed = {*changing_steps(train_ids, applied), *changing_steps(test_ids, applied)}
    steps = [name for name in ID_NORMALIZATIONS if name in changed]
    if not steps:
        return None
    full = normalizer(list(ID_NORMALIZATIONS))
    variants: dict = {"steps": steps}
    for part, ids in (("train", train_ids), ("test", test_ids)):
        positions = [i for i in map(int, might_change(ids)) if full(ids[i]) != ids[i]]
        variants[f"{part}_pos"] = np.asarray(positions, dtype=np.int64)
        variants[part] = hash_ids([full(ids[i]) for i in positions], salt)
    return variants


def hash_report(
    train: Mapping[str, Sequence[str]], test: Mapping[str, Sequence[str]], variants: Mapping[str, Mapping | None]
) -> tuple[dict, set[str], set[str]]:
    """The report of a hash alignment, with the train and test intersections it was computed from."""
    common_train = set.intersection(*(set(d) for d in train.values()))
    common_test = set.intersection(*(set(d) for d in test.values()))
    train_counts, test_counts = party_counts(train, common_train), party_counts(test, common_test)
    report = {
        "parties": {p: {"train": train_counts[p], "test": test_counts[p]} for p in train},
        "hint": normalization_hint(train, test, variants, (len(common_train), len(common_test))),
    }
    return report, common_train, common_test
