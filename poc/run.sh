#!/usr/bin/env bash
# Run one vflflare job end to end in a local NVFlare POC (real server, site and admin processes):
#   poc/run.sh jobs/<name> [--sites K] [--he] [--data-root DIR] [--workspace DIR] [--port P] [--timeout S] [--keep]
# Prints the results table and the path of the job's vflflare_results.json; exits non-zero when the
# job fails or times out. Every process it starts is stopped before it exits. See poc/README.md.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${VFLFLARE_PYTHON:-$HERE/../.venv/bin/python}"
if [[ ! -x "$PY" ]]; then
  echo "poc/run.sh: no Python environment at $PY (run scripts/setup_env.sh, or set VFLFLARE_PYTHON)" >&2
  exit 2
fi
exec "$PY" "$HERE/poc_run.py" "$@"
