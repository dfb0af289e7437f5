#!/usr/bin/env bash
# Create .venv (if needed) and install vflflare with the CPU torch wheel pinned.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import vflflare, nvflare, torch, pytest, xdist, hypothesis, tenseal, private_set_intersection.python, xgboost, material, mlflow, alembic, dp_accounting, rtdl_num_embeddings, importlinter, pyarrow" 2>/dev/null \
   || [ ! -x .venv/bin/ruff ]; then
  # torch first and pinned: a bare 'torch' requirement would pull the multi-GB CUDA build
  .venv/bin/pip install -q "torch==2.13.0"
  .venv/bin/pip install -q -e ".[test]"
  # XGBoost for the leaderboard's tree baselines (NVFlare's vertical XGBoost needs its federated build,
  # which the PyPI wheel has). --no-deps: its NCCL dependency (~470 MB) is only loaded for GPUs.
  .venv/bin/pip install -q --no-deps "xgboost==3.2.0"
fi
