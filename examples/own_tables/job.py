"""Train one-shot VFL on the hospital's and the lab's own tables in the NVFlare simulator, then score their
new rows (score.csv) with the model it saved, as NVFlare's examples run their jobs (a recipe and an env):

    python prepare_data.py --out /tmp/vflflare_examples/own_tables
    python job.py --data-root /tmp/vflflare_examples/own_tables

The model stays beside the data (<data root>/vflflare_models/<model id>/, the training run's own ID); the
predictions land in <data root>/vflflare_predictions/predictions_<model id>.csv, in the row order of the
coordinator's server/score.csv (the IDs it asks scores for), with predictions_<model id>.json beside it (which
model, which rows, when).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from nvflare.recipe import SimEnv

from vflflare.recipes import VFLRecipe
from vflflare.simulation import find_results

SITES = ["hospital", "lab"]


def run(recipe: VFLRecipe, workspace: Path) -> dict:
    """The job in the simulator; its vflflare_results.json."""
    outcome = recipe.execute(SimEnv(clients=SITES, workspace_root=str(workspace)))
    results = json.loads(find_results(outcome.get_result(timeout=1800, clean_up=False)).read_text())
    if "error" in results:
        raise SystemExit(1)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", type=Path, default=Path("/tmp/vflflare_examples/own_tables"))
    parser.add_argument("--workspace", type=Path, default=Path("/tmp/vflflare_examples/own_tables_ws"))
    parser.add_argument("--ssl-epochs", type=int, default=10)
    args = parser.parse_args()
    os.environ["VFLFLARE_DATA_ROOT"] = str(args.data_root.resolve())  # every simulated party reads its folder
    trained = run(
        VFLRecipe(algorithm="oneshot", sites=SITES, config={"ssl_epochs": args.ssl_epochs}), args.workspace / "train"
    )
    scored = run(
        VFLRecipe(algorithm="vertical_inference", sites=SITES, config={"model_job": trained["model_id"]}),
        args.workspace / "score",
    )
    print(f"test AUC {trained['metrics']['test_auc']:.4f}; predictions: {scored['training']['predictions']}")


if __name__ == "__main__":
    main()
