"""`weight_decay` (issue 14 item 4): Adam's L2 penalty on every optimizer, bottoms and heads alike; 0 (the
papers' setting and the default) leaves training as it was."""

from __future__ import annotations

import pytest

from vflflare import cli
from vflflare.config import ConfigError
from vflflare.protocol.inprocess import run_inprocess
from vflflare.protocol.model_store import LABEL_DIR, load_label_model, load_site_model, models_dir
from vflflare.registry import make_config

SITES = ["site-1", "site-2"]


def _weight_norms(tmp_path, data, weight_decay: float) -> tuple[float, float]:
    runs = tmp_path / f"runs_{weight_decay}"
    result = run_inprocess(
        make_config(algorithm="vanilla", split_epochs=20, weight_decay=weight_decay),
        SITES,
        str(data),
        runs_root=str(runs),
    )
    encoder, _, _ = load_site_model(models_dir(runs / "site-1", result["job_id"]) / "site-1", "site-1")
    head, _, _ = load_label_model(models_dir(runs / "server", result["job_id"]) / LABEL_DIR)
    bottom, top = (
        float(sum(p.detach().norm() ** 2 for n, p in m.named_parameters() if n.endswith("weight")) ** 0.5)
        for m in (encoder, head)
    )
    return bottom, top


def test_weight_decay_shrinks_bottoms_and_head(tmp_path):
    data = tmp_path / "data"
    assert cli.main(["split", "--dataset", "breast_cancer", "--overlap", "200", "--out", str(data)]) == 0
    plain, decayed = _weight_norms(tmp_path, data, 0.0), _weight_norms(tmp_path, data, 0.5)
    assert decayed[0] < 0.8 * plain[0] and decayed[1] < 0.8 * plain[1]


def test_a_negative_weight_decay_is_refused():
    with pytest.raises(ConfigError, match="weight_decay must be >= 0"):
        make_config(algorithm="oneshot", weight_decay=-0.1)
