"""Make a job folder self-contained for a real deployment: a copy of the job with the vflflare
package in each app's custom/ folder. Sites that do not have vflflare installed then load it from
the job (NVFlare puts app/custom on the job's import path). The committed jobs/ are never changed.

Kept free of heavy imports (torch, nvflare) so deployment scripts can call it cheaply.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def stage_job(job_dir: str | Path, out_dir: str | Path) -> Path:
    """Copy `job_dir` to `out_dir/<job name>` (replacing an earlier copy) and put the vflflare
    package into `<app>/custom/vflflare` of every app in its meta.json deploy_map."""
    source = Path(job_dir).resolve()
    meta_file = source / "meta.json"
    if not meta_file.is_file():
        raise ValueError(f"{source} is not a job folder (no meta.json)")
    meta = json.loads(meta_file.read_text())
    staged = Path(out_dir).resolve() / source.name
    if staged == source or source in staged.parents:
        raise ValueError(f"cannot stage {source} into itself ({staged})")
    if staged.exists():
        shutil.rmtree(staged)
    shutil.copytree(source, staged, ignore=IGNORE)
    for app in meta.get("deploy_map") or {"app": []}:
        custom = staged / app / "custom"
        custom.mkdir(parents=True, exist_ok=True)
        shutil.copytree(PACKAGE_DIR, custom / PACKAGE_DIR.name, ignore=IGNORE, dirs_exist_ok=True)
    return staged


CUSTOM_NOTE_FILE = "README.txt"
CUSTOM_NOTE = """This folder holds no code: every party runs the vflflare it installed.
The note makes NVFlare's simulator and POC treat the job as bring-your-own-code, so that their component
allow list, which does not name vflflare, is skipped. A provisioned deployment's kits name vflflare's
components and refuse jobs that bring code: provisioning/submit_job.py submits the job without this
folder (vflflare.staging.without_code_note).
"""


def without_code_note(job_dir: str | Path) -> Path:
    """Remove every app's custom/ folder that holds nothing but CUSTOM_NOTE (in place, on a copy of a job):
    what a provisioned deployment's `byoc: none` policy accepts. A custom/ folder with code is kept."""
    job_dir = Path(job_dir)
    for custom in job_dir.glob("*/custom"):
        if [p.name for p in custom.iterdir()] == [CUSTOM_NOTE_FILE]:
            shutil.rmtree(custom)
    return job_dir


def package_folder() -> Path:
    """A temporary folder holding only a copy of the vflflare package: what FedJob copies into an
    app's custom/ folder (it copies a folder's contents, so the package needs a parent of its own)."""
    parent = Path(tempfile.mkdtemp(prefix="vflflare-code-"))
    shutil.copytree(PACKAGE_DIR, parent / PACKAGE_DIR.name, ignore=IGNORE)
    return parent
