"""Issue 37: a party requires its defenses whatever the job asks, through the `enforce` object of its own
local/vflflare.json (privacy/enforcement.py): a noise floor, an epsilon ceiling, the stricter of the job's and
its own used; the results record what was enforced and by whom; a party enforces only what it applies itself."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flare_fakes import FakeContext
from scoring_helpers import score_the_test_rows

from vflflare import cli
from vflflare.flare.site_config import enforcement_from_file, local_enforcement
from vflflare.privacy.enforcement import Enforcement, apply_enforcement, parse_enforcement
from vflflare.protocol.inprocess import InProcessTransport, run_inprocess
from vflflare.protocol.model_store import read_predictions
from vflflare.registry import make_config

SITES = ["site-bank", "site-telco"]
FAST = {"algorithm": "oneshot", "ssl_epochs": 1}


def local_config(tmp_path, party: str, content: dict):
    """A party's local/vflflare.json, as its operator writes it."""
    path = tmp_path / party / "local" / "vflflare.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(content))
    return path


def run_recording(monkeypatch, cfg, enforce=None) -> tuple[dict, dict[str, np.ndarray]]:
    """The run's results and, per site, the aligned rows' representations of its first upload."""
    first: dict[str, np.ndarray] = {}
    send = InProcessTransport._send

    def recording(self, task, payloads):
        replies = send(self, task, payloads)
        if task == "represent":
            for site, reply in replies.items():
                first.setdefault(site, np.asarray(reply["aligned"]))
        return replies

    monkeypatch.setattr(InProcessTransport, "_send", recording)
    return run_inprocess(cfg, SITES, None, enforce=enforce), first


def test_a_site_enforces_representation_noise_the_job_does_not_ask_for(tmp_path, monkeypatch):
    path = local_config(tmp_path, "site-telco", {"data_root": "/data", "enforce": {"representation_noise": 0.5}})
    enforce = {"site-telco": enforcement_from_file(path, "site-telco")}
    cfg = make_config(FAST)
    plain, plain_sent = run_recording(monkeypatch, cfg)
    enforced, enforced_sent = run_recording(monkeypatch, cfg, enforce)

    # (1) recorded, with who enforced it; the job's own settings are unchanged
    assert "privacy" not in plain  # at defaults nothing is recorded
    assert enforced["privacy"]["enforced"] == {
        "site-telco": {"representation_noise": {"job": 0.0, "enforced": 0.5, "by": "site-telco local/vflflare.json"}}
    }
    assert enforced["defenses"] == {} and enforced["config"]["representation_noise"] == 0.0
    assert "site-telco" in enforced["privacy"]["private_randomness"]
    assert "site-bank" not in enforced["privacy"]["private_randomness"]  # it drew no defense noise
    # (2) what site-telco sent is noised (std 0.5 x the RMS of its representations); site-bank's is unchanged
    np.testing.assert_array_equal(enforced_sent["site-bank"], plain_sent["site-bank"])
    noise = enforced_sent["site-telco"] - plain_sent["site-telco"]
    rms = float(np.sqrt(np.mean(plain_sent["site-telco"] ** 2)))
    assert float(np.sqrt(np.mean(noise**2))) == pytest.approx(0.5 * rms, rel=0.1)
    assert enforced["metrics"] != plain["metrics"]

    # a job that already asks for more noise than the floor: nothing enforced, nothing recorded
    stricter = run_inprocess(make_config(FAST, representation_noise=0.8), SITES, None, enforce=enforce)
    assert "enforced" not in stricter["privacy"]


def test_a_sites_noise_floor_covers_its_scoring_uploads(tmp_path):
    sites, data, runs = ["site-1", "site-2"], tmp_path / "data", tmp_path / "runs"
    assert cli.main(["split", "--dataset", "breast_cancer", "--overlap", "200", "--out", str(data)]) == 0
    score_the_test_rows(data, sites)
    trained = run_inprocess(make_config(FAST), sites, str(data), runs_root=str(runs))
    scoring = make_config(algorithm="vertical_inference", model_job=trained["job_id"])
    clean = run_inprocess(scoring, sites, str(data), runs_root=str(runs))
    enforce = {"site-2": Enforcement("site-2", {"representation_noise": 2.0}, str(tmp_path / "vflflare.json"))}
    noised = run_inprocess(scoring, sites, str(data), runs_root=str(runs), enforce=enforce)
    assert "privacy" not in clean
    assert noised["privacy"]["enforced"] == {
        "site-2": {"representation_noise": {"job": 0.0, "enforced": 2.0, "by": "site-2 local/vflflare.json"}}
    }
    got, expected = (read_predictions(Path(r["training"]["predictions"])) for r in (noised, clean))
    assert got.keys() == expected.keys() and sum(got[row] != expected[row] for row in got) > 0.9 * len(got)


def test_a_bad_enforce_entry_fails_naming_the_file_and_the_key(tmp_path):
    for content, words in [
        ({"enforce": {"representation_nosie": 0.5}}, ["'enforce.representation_nosie'", "not a defense"]),
        ({"enforce": {"representation_noise": "high"}}, ["'enforce.representation_noise'", "number > 0"]),
        ({"enforce": {"label_dp_epsilon": True}}, ["'enforce.label_dp_epsilon'", "number > 0"]),
        ({"enforce": ["representation_noise"]}, ["'enforce'", "object"]),
    ]:
        path = local_config(tmp_path / str(len(words[0]) + len(str(content))), "site-telco", content)
        with pytest.raises(ValueError) as caught:
            enforcement_from_file(path, "site-telco")
        assert str(path) in str(caught.value) and "site-telco" in str(caught.value)
        assert all(word in str(caught.value) for word in words), str(caught.value)
    # the server uploads no representations: it cannot enforce a site's defense
    path = local_config(tmp_path, "server", {"enforce": {"representation_noise": 0.5}})
    with pytest.raises(ValueError, match=r"'enforce.representation_noise' is a site's defense") as caught:
        enforcement_from_file(path, "server")
    assert str(path) in str(caught.value)


def test_a_feature_site_cannot_enforce_the_label_partys_label_dp(tmp_path):
    path = local_config(tmp_path, "site-telco", {"enforce": {"label_dp_epsilon": 1.0}})
    enforce = {"site-telco": enforcement_from_file(path, "site-telco")}
    with pytest.raises(ValueError) as caught:
        run_inprocess(make_config(FAST), SITES, None, enforce=enforce)
    message = str(caught.value)
    assert str(path) in message and "'enforce.label_dp_epsilon'" in message
    assert "a defense of the label party, which 'site-telco' is not" in message
    assert "this job's label party is 'server'" in message
    # an algorithm with no label channel has nothing for it to protect: moot, not an error
    cfg = make_config({"algorithm": "ssvfl_i"})
    assert apply_enforcement(cfg, enforce["site-telco"], hosts_label=False, hosts_site=True) == (cfg, {})


def test_the_label_party_enforces_an_epsilon_ceiling_and_the_accounting_uses_it(tmp_path):
    path = local_config(tmp_path, "server", {"enforce": {"label_dp_epsilon": 2, "gradient_dp_epsilon": 4}})
    enforce = {"server": enforcement_from_file(path, "server")}
    job = {**FAST, "gradient_clip": 1.0, "gradient_normalize": True}
    results = run_inprocess(make_config(job), SITES, None, enforce=enforce)
    by = "server local/vflflare.json"
    assert results["privacy"]["enforced"] == {
        "server": {
            "label_dp_epsilon": {"job": 0.0, "enforced": 2.0, "by": by},
            "gradient_dp_epsilon": {"job": 0.0, "enforced": 4.0, "by": by},
        }
    }
    streams = results["privacy"]["dp"]["streams"]
    assert streams["labels"]["epsilon"] == pytest.approx(2.0)
    assert streams["gradients"]["epsilon"] <= 4.0 and streams["gradients"]["noise_multiplier"] > 0
    assert results["defenses"] == {"gradient_clip": 1.0, "gradient_normalize": True}  # the job's own

    # the job's own noise is stricter (gradient_noise 3 spends eps 2.75 < 4; label eps 1 < 2): nothing enforced
    stricter = make_config(job, gradient_noise=3.0, label_dp_epsilon=1.0)
    assert apply_enforcement(stricter, enforce["server"], hosts_label=True, hosts_site=False) == (stricter, {})
    # a gradient noise floor needs the job's clipping
    with pytest.raises(ValueError, match=r"'enforce.gradient_dp_epsilon' needs the job's gradient_clip > 0"):
        apply_enforcement(
            make_config(FAST),
            Enforcement("server", {"gradient_dp_epsilon": 4.0}, str(path)),
            hosts_label=True,
            hosts_site=False,
        )


def test_enforce_comes_from_the_partys_workspace(tmp_path):
    assert local_enforcement(FakeContext(tmp_path), "site-telco") is None
    (tmp_path / "vflflare.json").write_text(json.dumps({"data_root": "/d", "enforce": {"representation_noise": 1}}))
    found = local_enforcement(FakeContext(tmp_path), "site-telco")
    assert found.values == {"representation_noise": 1.0} and found.by == "site-telco local/vflflare.json"
    assert parse_enforcement({}, tmp_path, "site-telco") is None
