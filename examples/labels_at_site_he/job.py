"""One-shot VFL with the labels at the clinic and CKKS homomorphic encryption (TenSEAL) on everything the
sites send, in the NVFlare simulator:

    python prepare_data.py --out /tmp/vflflare_examples/labels_at_site
    python job.py --data-root /tmp/vflflare_examples/labels_at_site

The coordinator only relays ciphertexts (the result's communication.tensor_kinds counts what crossed it);
the clinic decrypts what it needs with the secret key every site holds and the coordinator does not.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from nvflare.recipe import SimEnv

from vflflare.privacy.ckks import write_contexts
from vflflare.recipes import VFLRecipe
from vflflare.simulation import find_results

SITES = ["clinic", "registry"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", type=Path, default=Path("/tmp/vflflare_examples/labels_at_site"))
    parser.add_argument("--workspace", type=Path, default=Path("/tmp/vflflare_examples/labels_at_site_ws"))
    parser.add_argument("--ssl-epochs", type=int, default=10)
    args = parser.parse_args()
    os.environ["VFLFLARE_DATA_ROOT"] = str(args.data_root.resolve())
    recipe = VFLRecipe(
        algorithm="oneshot", sites=SITES, label_owner="clinic", he=True, config={"ssl_epochs": args.ssl_epochs}
    )
    # the simulator copies its workspace's startup/ into every party's kit: the CKKS contexts go there
    # (a provisioned project gets them from HEBuilder instead)
    write_contexts(args.workspace / recipe.name / "startup")
    outcome = recipe.execute(SimEnv(clients=SITES, workspace_root=str(args.workspace)))
    results = json.loads(find_results(outcome.get_result(timeout=1800, clean_up=False)).read_text())
    kinds = results.get("communication", {}).get("tensor_kinds", {})
    print(f"float tensors through the coordinator: {kinds}")
    raise SystemExit(1 if "error" in results else 0)


if __name__ == "__main__":
    main()
