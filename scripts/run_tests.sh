#!/usr/bin/env bash
# Set up the environment if needed, then run the whole test suite (unit + NVFlare simulator tests).
# Test files run on VFLFLARE_TEST_WORKERS processes at once (default 2; 0 runs them one by one): an
# NVFlare simulator or POC run keeps about one core busy, and a file's tests stay on one worker
# (--dist loadfile), so a module's shared POC is started once.
# Tests that need the benchmark data (../shared/data, or VFLFLARE_DATA_DIR) are skipped when it is absent;
# VFLFLARE_REQUIRE_DATA=1 (set by .ci/run) makes that an error (tests/conftest.py, needs_data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "${VFLFLARE_TEST_WORKERS:-2}" --dist loadfile "$@"
