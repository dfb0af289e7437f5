"""Issue 37: every site runs the same vflflare. The coordinator sends its release and code digest with every
task; a site that runs another refuses it, and the job ends with one error naming the site and both."""

from __future__ import annotations

import time

import pytest
import tomllib
from simulator_helpers import REPO, run_job

import vflflare
from vflflare.code_identity import TEST_HOOK_ENV, code_digest, code_identity, mismatch


def test_the_version_is_the_packages():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert vflflare.__version__ == project["version"]


def test_the_code_digest_covers_every_py_file_by_path_and_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.py").write_text("x = 1\n")
    (tmp_path / "y.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not code")
    first = code_digest(tmp_path)
    assert first == code_digest(tmp_path) and len(first) == 64
    (tmp_path / "notes.txt").write_text("still not code")
    assert code_digest(tmp_path) == first
    (tmp_path / "a" / "x.py").write_text("x = 2\n")
    assert code_digest(tmp_path) != first
    (tmp_path / "a" / "x.py").write_text("x = 1\n")
    (tmp_path / "a" / "x.py").rename(tmp_path / "a" / "z.py")
    assert code_digest(tmp_path) != first
    own = code_identity()
    assert own == {"version": vflflare.__version__, "code": code_digest(REPO / "custom" / "vflflare")}


def test_a_mismatch_names_the_site_and_both_versions(monkeypatch):
    server = {"version": "0.1.0", "code": "9b77d0aa" * 8}
    assert mismatch("site-telco", dict(server), server) is None
    assert mismatch("site-telco", {"version": "0.1.0", "code": "3f2a9c1e" * 8}, server) == (
        "site-telco runs vflflare 0.1.0 (code 3f2a9c1e3f2a), the server 0.1.0 (code 9b77d0aa9b77): install the "
        "same vflflare release on every site"
    )
    assert "site-telco runs vflflare 0.0.9" in mismatch("site-telco", {**server, "version": "0.0.9"}, server)
    monkeypatch.setenv(TEST_HOOK_ENV, "site-telco=0.0.9:abc,site-x=1:2")
    assert code_identity("site-telco") == {"version": "0.0.9", "code": "abc"}
    assert code_identity("server") == code_identity()


@pytest.mark.simulator
def test_a_site_running_other_code_ends_the_job_with_its_name(tmp_path, monkeypatch):
    monkeypatch.setenv(TEST_HOOK_ENV, "site-2=0.0.9:0badc0de0badc0de")
    start = time.monotonic()
    results = run_job(tmp_path, "oneshot", ssl_epochs=1, timeout=300)
    assert time.monotonic() - start < 240
    own = code_identity()
    assert results["status"] == "failed" and results["site"] == "site-2"
    assert (
        f"site-2 runs vflflare 0.0.9 (code 0badc0de0bad), the server {own['version']} (code {own['code'][:12]}): "
        f"install the same vflflare release on every site"
    ) in results["error"]
    assert results["vflflare"] == own
