"""Where a bench record came from: the code (git commit, and whether the tree had uncommitted changes)
and the environment (interpreter, the libraries that set the numbers, the machine). Every record carries
both, so a committed results file says which code and which machine produced each number."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

# the libraries whose version can move a number: training (torch, numpy), baselines (xgboost,
# scikit-learn), the simulator runs (nvflare), Marvell's optimiser (scipy), the DP accounting (dp-accounting),
# numeric_transform ple (rtdl_num_embeddings)
LIBRARIES = ("torch", "numpy", "scipy", "nvflare", "xgboost", "scikit-learn", "dp-accounting", "rtdl_num_embeddings")
UNKNOWN = "unknown"


def _git(*args: str) -> str:
    # the package's own checkout: the code that ran, wherever the bench was started from
    here = Path(__file__).resolve().parent
    try:
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return UNKNOWN


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return UNKNOWN


@lru_cache(maxsize=1)
def git_state() -> dict[str, object]:
    """The commit, and whether the package's tracked files differ from it: only the package's code runs in
    a bench, so edits to tests or reports elsewhere in the tree do not make its numbers unreproducible."""
    commit = _git("rev-parse", "HEAD")
    if commit == UNKNOWN:
        return {"commit": UNKNOWN, "dirty": None}
    return {"commit": commit, "dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "--", "."))}


def blas() -> list[str]:
    """The BLAS libraries numpy and scipy loaded (their kernels can move the last digits of a number)."""
    from threadpoolctl import threadpool_info

    return sorted(
        {
            f"{m.get('internal_api')} {m.get('version')} {m.get('architecture') or ''}".strip()
            for m in threadpool_info()
            if m.get("user_api") == "blas"
        }
    )


@lru_cache(maxsize=1)
def environment() -> dict[str, object]:
    import scipy.linalg  # noqa: F401 - loads scipy's BLAS, so blas() names it too

    return {
        "python": platform.python_version(),
        **{name: _version(name) for name in LIBRARIES},
        "blas": blas(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


def environment_record() -> dict[str, object]:
    """One flat dict, as the report suites' records carry it: the commit (and whether the package's code
    differed from it), the libraries and machine, and torch's intra-op threads."""
    import torch

    return {**git_state(), **environment(), "torch_threads": torch.get_num_threads()}
