"""A bench folder's settings: what its numbers depend on besides (dataset, overlap, seed, method).

A rerun into a folder skips the runs already in its results.jsonl, keyed on those four, so it may add
datasets, overlaps, seeds and methods, but not change a setting: the folder would then hold runs made
with two settings under one table. The folder writes its settings to bench.json before its first run,
and a rerun with other settings is an error that lists them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SETTINGS_FILE = "bench.json"
LEGACY_SPEC = "spec.json"  # written at the end of a run by earlier versions: the same keys
# the bench options that change a run's numbers (sim: the same numbers, but a run of the other kind; the
# data folder is left out: a dataset name means one table, and the folder's splits are cut once)
KEYS = ("sites", "sim", "settings", "ensemble")


def as_flags(settings: dict[str, Any]) -> dict[str, Any]:
    """Folder settings as the command-line options that set them, one entry per --set key."""
    flags = {f"--{k}": settings[k] for k in KEYS if k != "settings"}
    return {**flags, **{f"--set {k}": v for k, v in sorted(settings["settings"].items())}}


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """'option: value there, value now' for each option that differs ('unset' where one side lacks it)."""
    there, now = as_flags(old), as_flags(new)
    show = lambda flags, k: json.dumps(flags[k]) if k in flags else "unset"  # noqa: E731
    return [
        f"{k}: {show(there, k)} there, {show(now, k)} now"
        for k in sorted(set(there) | set(now), key=_order)
        if there.get(k, _MISSING) != now.get(k, _MISSING)
    ]


_MISSING = object()


def _order(flag: str) -> tuple[bool, str]:
    return flag.startswith("--set"), flag


def recorded(out: Path, defaults: dict[str, Any]) -> dict[str, Any] | None:
    """The settings `out` holds runs for: bench.json, or an earlier version's spec.json (an option it
    lacks did not exist yet, so its default ran); None if neither."""
    for name in (SETTINGS_FILE, LEGACY_SPEC):
        path = out / name
        if path.exists():
            data = json.loads(path.read_text())
            return {k: data.get(k, defaults[k]) for k in KEYS}
    return None


def claim(out: Path, settings: dict[str, Any], defaults: dict[str, Any], has_runs: bool) -> None:
    """Write `settings` to out/bench.json, or check them against the folder's; raises ValueError on a
    difference, and for a folder that holds runs but no record of their settings."""
    old = recorded(out, defaults)
    if old is None and has_runs:
        raise ValueError(
            f"{out} holds runs but no {SETTINGS_FILE}: their settings are unknown, so a rerun could "
            f"mix runs; use another --out"
        )
    changed = differences(old, settings) if old is not None else []
    if changed:
        raise ValueError(
            f"{out / SETTINGS_FILE}: this folder holds runs made with other settings, and a rerun "
            f"would mix them under one table: " + "; ".join(changed) + ". Use another --out, or the folder's settings."
        )
    if not (out / SETTINGS_FILE).exists():
        out.mkdir(parents=True, exist_ok=True)
        (out / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
