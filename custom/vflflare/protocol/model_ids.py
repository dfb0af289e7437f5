"""Model IDs and the list of saved models (issue 38): light, no torch, so `vflflare models` starts at once.

Every training run that saves a model gets a model ID of its own, `<job name>-<algorithm>-<local time>`
(`oneshot_vfl-oneshot-20261127T132501`), chosen by the coordinator and sent to the sites with setup. It
names the folder `vflflare_models/<model id>/` under each party's runs root, so a second run beside the
first adds a folder (the simulator calls every job `simulate_job`: its NVFlare job id cannot name a model).
An ID already taken under any runs root the coordinator can see gets `-2`, `-3`, ...; a party never
writes into a model folder that already holds its manifest (model_store.py).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MODELS_DIR = "vflflare_models"
LABEL_DIR = "label"
MANIFEST = "manifest.json"
SIMULATOR_JOB_ID = "simulate_job"  # the id NVFlare's simulator gives every job
RUNS_ROOT_ENV = "VFLFLARE_RUNS_ROOT"  # as checkpoint.RUNS_ROOT_ENV (that module imports torch)


def _part(text: str) -> str:
    """A name as part of a folder name: letters, digits, '.', '_' and '-' kept, anything else '_'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("._-") or "job"


def new_model_id(
    job_name: str, algorithm: str, roots: Iterable[str | Path | None] = (), now: float | None = None
) -> str:
    """`<job name>-<algorithm>-<YYYYmmddTHHMMSS>` (local time), with `-2`, `-3`, ... while a model of that ID
    is already under one of `roots` (the runs roots this party knows of)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now))
    base = f"{_part(job_name)}-{_part(algorithm)}-{stamp}"
    known = [Path(r) / MODELS_DIR for r in roots if r]
    model_id, n = base, 1
    while any((folder / model_id).exists() for folder in known):
        n += 1
        model_id = f"{base}-{n}"
    return model_id


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def list_models(root: str | Path) -> list[dict[str, Any]]:
    """The models saved under runs root `root` (`<root>/vflflare_models/*/`), oldest first: model id,
    algorithm, when, the sites (in the head's input order where the label model is here), the label owner,
    the test metric (where the label model is here) and the parties whose files are here."""
    found = []
    for folder in sorted(Path(root, MODELS_DIR).glob("*/")):
        manifests = {p.parent.name: m for p in sorted(folder.glob(f"*/{MANIFEST}")) if (m := _read(p)) is not None}
        if not manifests:
            continue
        label = manifests.get(LABEL_DIR, {})
        first = label or next(iter(manifests.values()))
        sites = label.get("sites") or [party for party in manifests if party != LABEL_DIR]
        found.append(
            {
                "model_id": folder.name,
                "algorithm": first.get("algorithm"),
                "created_at": min(str(m.get("created_at", "")) for m in manifests.values()),
                "sites": list(sites),
                "label_owner": first.get("label_owner"),
                "metrics": dict(label.get("metrics") or {}),
                "classes": label.get("classes"),
                "parties_here": sorted(manifests),
                "job_id": first.get("job_id"),
            }
        )
    return sorted(found, key=lambda m: (m["created_at"], m["model_id"]))


def runs_roots_of(data_root: str | Path | None) -> list[Path]:
    """Where the parties of a data root keep their models (checkpoint.runs_root): VFLFLARE_RUNS_ROOT if set,
    else the data root and, for a party folder that is a link (as poc/run.sh makes), the folder holding the
    folder it points to; without a data root, ~/.vflflare/runs (the embedded default's)."""
    if os.environ.get(RUNS_ROOT_ENV):
        return [Path(os.environ[RUNS_ROOT_ENV])]
    if data_root is None:
        return [Path.home() / ".vflflare" / "runs"]
    roots = [Path(data_root)]
    for party in sorted(Path(data_root).iterdir()) if Path(data_root).is_dir() else []:
        if party.is_dir() and party.name not in (MODELS_DIR, "vflflare_runs", "vflflare_predictions"):
            real = party.resolve().parent
            if all(real != r.resolve() for r in roots):
                roots.append(real)
    return roots


def format_models(root: str | Path, models: list[dict[str, Any]]) -> str:
    """The table `vflflare models` prints."""
    where = Path(root) / MODELS_DIR
    if not models:
        return f"no saved models under {where}"
    rows = [("model id", "algorithm", "created", "sites", "label owner", "metric", "files here")]
    for m in models:
        metric = ", ".join(f"{k} {v:.4f}" for k, v in sorted(m["metrics"].items())) or "-"
        rows.append(
            (
                m["model_id"],
                str(m["algorithm"]),
                m["created_at"][:19].replace("T", " "),
                ",".join(m["sites"]),
                str(m["label_owner"]),
                metric,
                ",".join(m["parties_here"]),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join([f"{len(models)} saved model(s) under {where}:", *lines])
