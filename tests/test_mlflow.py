"""Issue 28 item 8: with `mlflow_uri`, a job streams the same curves as to TensorBoard to MLflow through
NVFlare's own MLflowReceiver, here into a real local MLflow tracking store (SQLite)."""

from __future__ import annotations

import pytest
from nvflare.recipe import SimEnv

from vflflare.recipes import VFLRecipe


@pytest.mark.simulator
def test_a_job_streams_each_sites_curves_to_mlflow(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    recipe = VFLRecipe(algorithm="oneshot", min_clients=2, config={"ssl_epochs": 3}, mlflow_uri=uri)
    recipe.execute(SimEnv(num_clients=2, workspace_root=str(tmp_path / "ws"))).get_result(timeout=600, clean_up=False)
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("vflflare oneshot")
    runs = {
        run.info.run_name.split("-", 2)[0] + "-" + run.info.run_name.split("-", 2)[1]: run
        for run in client.search_runs([experiment.experiment_id])
    }
    assert set(runs) == {"site-1", "site-2"}
    for run in runs.values():
        history = client.get_metric_history(run.info.run_id, "ssl/oneshot_loss")
        assert sorted(m.step for m in history) == [0, 1, 2]  # one point per local SSL epoch
        assert all(m.value > 0 for m in history)
