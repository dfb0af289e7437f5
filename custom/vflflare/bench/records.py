"""Bench records: one JSON object a line, appended as each run ends, so an interrupted bench keeps what ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file; [] if there is none yet."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def append_jsonl(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def refuse_mixed_settings(path: Path, overrides: dict[str, Any]) -> None:
    """Exit naming them when `path` holds runs with other --set overrides: a resume keyed on the run's
    cell would otherwise mix runs of two settings in one file."""
    other = {json.dumps(r.get("overrides", {}), sort_keys=True) for r in read_jsonl(path)} - {
        json.dumps(overrides, sort_keys=True)
    }
    if other:
        raise SystemExit(f"{path} holds runs with --set {', '.join(sorted(other))}, not {overrides}: use another --out")
