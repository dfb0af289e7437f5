"""NVFlare's vertical XGBoost (`XGBVerticalRecipe`, histogram-based, the label at a site) on a vflflare
split, as the leaderboard's federated tree baseline.

Each site's CSVs for NVFlare's `CSVDataLoader` hold its preprocessed columns of the aligned training rows
(in the job's canonical order, the same at every site) and of the test rows, the label owner's with the
label first. The test rows are XGBoost's "eval" set only to read the test AUC after the last round:
the boosting rounds and depth are fixed beforehand (chosen on the validation rows by the central XGBoost
baseline, which vertical XGBoost reproduces exactly when nothing is encrypted), so nothing is tuned on
them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vflflare.bench.baselines import ETA


def write_site_csvs(
    folder: Path, site: str, train: np.ndarray, test: np.ndarray, labels: tuple[np.ndarray, np.ndarray] | None
) -> None:
    """`folder/<site>/train.csv` and `valid.csv` (no header): the label first at the label owner."""
    out = folder / site
    out.mkdir(parents=True, exist_ok=True)
    for name, x, y in (
        ("train", train, None if labels is None else labels[0]),
        ("valid", test, None if labels is None else labels[1]),
    ):
        block = x if y is None else np.column_stack([y.astype(np.float64), x])
        np.savetxt(out / f"{name}.csv", block, delimiter=",", fmt="%.9g")


def last_eval_auc(workspace: Path, label_owner: str) -> float:
    """The eval AUC of the last boosting round, from the TensorBoard events the recipe's metrics writer
    streams to the server (`tb_events/<label owner>/eval_metrics_auc`)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    folders = sorted(workspace.rglob(f"tb_events/{label_owner}/eval_metrics_auc"))
    if not folders:
        raise RuntimeError(f"vertical XGBoost wrote no eval AUC under {workspace}; see its log.txt files")
    events = EventAccumulator(str(folders[0]))
    events.Reload()
    return float(events.Scalars("eval_metrics")[-1].value)


def run_vertical_xgboost(
    folder: Path, sites: list[str], label_owner: str, depth: int, rounds: int, workspace: Path
) -> dict:
    """Run the recipe in NVFlare's simulator on the CSVs under `folder`; the test AUC after `rounds`."""
    from nvflare.app_opt.xgboost.histogram_based_v2.csv_data_loader import CSVDataLoader
    from nvflare.app_opt.xgboost.recipes import XGBVerticalRecipe
    from nvflare.recipe import SimEnv, set_per_site_config

    params = {
        "max_depth": depth,
        "eta": ETA,
        "objective": "binary:logistic",
        "eval_metric": "auc",
        "tree_method": "hist",
        "nthread": 1,
    }
    recipe = XGBVerticalRecipe(
        name="vertical_xgb",
        min_clients=len(sites),
        num_rounds=rounds,
        label_owner=label_owner,
        early_stopping_rounds=0,
        xgb_params=params,
    )
    set_per_site_config(recipe, {s: {"data_loader": CSVDataLoader(folder=str(folder.resolve()))} for s in sites})
    recipe.execute(SimEnv(clients=sites, workspace_root=str(workspace)))
    return {"test_auc": last_eval_auc(workspace, label_owner), "depth": depth, "rounds": rounds}


def run_on_split(split, depth: int, rounds: int, work: Path) -> dict:
    """Vertical XGBoost on a `baselines.AlignedSplit`: each site's columns of the aligned training rows and
    the test rows, the labels at the split's label owner."""
    folder = work / "xgb_data"
    for site in split.sites:
        labels = (split.y(split.train_ids), split.y(split.test_ids, "test")) if site == split.owner else None
        write_site_csvs(
            folder, site, split.x(split.train_ids, sites=[site]), split.x(split.test_ids, "test", [site]), labels
        )
    return run_vertical_xgboost(folder, split.sites, split.owner, depth, rounds, work / "xgb_ws")
