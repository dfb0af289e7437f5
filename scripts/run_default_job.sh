#!/usr/bin/env bash
# Set up the environment if needed, then run the one-shot VFL job in the NVFlare simulator on the
# embedded default (scikit-learn's breast-cancer table split over 2 sites) and print the results table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
unset VFLFLARE_DATA_ROOT
exec .venv/bin/vflflare simulate jobs/oneshot_vfl -w "${WORKSPACE:-${TMPDIR:-/tmp}/vflflare-$(id -un)/oneshot_vfl}" -n 2 -t 2 "$@"
