"""Build the Collab split-NN job with CollabRecipe and export it as a self-contained job folder
(vflflare, this package included, in every app's custom/), runnable by `nvflare simulator` and by a POC:

    python -c "from vflflare.bench.collab_split.job import export_job; print(export_job('/tmp/collab_jobs', 2, 21))"
    VFLFLARE_DATA_ROOT=/tmp/credit2 python -m nvflare.cli simulator /tmp/collab_jobs/collab_split_k2 -w ws -n 2 -t 2
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from nvflare.collab import CollabRecipe

from vflflare.bench.collab_split.app import ARRAYS, SplitServer, SplitSite

IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "results*.jsonl")


def make_recipe(
    name: str, sites: int, epochs: int, warmup_steps: int = 25, call_timeout: float = 60.0, payload: str = ARRAYS
) -> CollabRecipe:
    return CollabRecipe(
        job_name=name,
        server=SplitServer(epochs=epochs, warmup_steps=warmup_steps, call_timeout=call_timeout, payload=payload),
        client=SplitSite(),
        min_clients=sites,
    )


def export_job(
    out_dir: str | Path, sites: int, epochs: int, warmup_steps: int = 25, name: str | None = None, payload: str = ARRAYS
) -> Path:
    """Export the recipe, then copy vflflare/ (this package with it) into each app's custom/ folder (the
    recipe ships only the file defining each class, at custom/'s top level)."""
    import vflflare

    name = name or f"collab_split{'' if payload == ARRAYS else '_bytes'}_k{sites}"
    job_dir = Path(out_dir).resolve()
    shutil.rmtree(job_dir / name, ignore_errors=True)
    make_recipe(name, sites, epochs, warmup_steps, payload=payload).export(str(job_dir))
    root = job_dir / name
    meta = json.loads((root / "meta.json").read_text())
    for app in meta["deploy_map"]:
        custom = root / app / "custom"
        custom.mkdir(parents=True, exist_ok=True)
        package = Path(vflflare.__file__).resolve().parent
        shutil.copytree(package, custom / package.name, ignore=IGNORE, dirs_exist_ok=True)
    return root
