"""One-shot VFL across a site with images and a site with a table, in the NVFlare simulator. Each site
trains the bottom model its data calls for (a small CNN on the scanner's images, an MLP on the registry's
columns); only representations and gradients cross.

    python prepare_data.py --out /tmp/vflflare_examples/image_and_table
    python job.py --data-root /tmp/vflflare_examples/image_and_table
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from nvflare.recipe import SimEnv

from vflflare.recipes import VFLRecipe
from vflflare.simulation import find_results

SITES = ["registry", "scanner"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", type=Path, default=Path("/tmp/vflflare_examples/image_and_table"))
    parser.add_argument("--workspace", type=Path, default=Path("/tmp/vflflare_examples/image_and_table_ws"))
    parser.add_argument("--ssl-epochs", type=int, default=10)
    args = parser.parse_args()
    os.environ["VFLFLARE_DATA_ROOT"] = str(args.data_root.resolve())
    recipe = VFLRecipe(algorithm="oneshot", sites=SITES, config={"ssl_epochs": args.ssl_epochs})
    outcome = recipe.execute(SimEnv(clients=SITES, workspace_root=str(args.workspace)))
    results = json.loads(find_results(outcome.get_result(timeout=1800, clean_up=False)).read_text())
    if "error" in results:
        raise SystemExit(1)
    print(f"test accuracy {results['metrics']['test_accuracy']:.4f} (10 classes)")


if __name__ == "__main__":
    main()
