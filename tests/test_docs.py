"""Issue 28 item 6: the documentation site builds with `mkdocs build --strict` (a broken link or a page left
out of the build fails it), its settings page lists every setting of every algorithm, and the README stays
short."""

from __future__ import annotations

import subprocess
import sys

from deployment_helpers import REPO

from vflflare.registry import algorithms


def test_the_docs_build_strictly_with_every_setting(tmp_path):
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert build.returncode == 0, build.stderr[-4000:]
    settings = (site / "settings" / "index.html").read_text()
    built_in = [name for name, plugin in algorithms().items() if plugin.__module__.startswith("vflflare.")]
    assert all(f"<code>{name}</code>" in settings for name in built_in)
    assert "gradient_marvell" in settings and "DefenseSettings" in settings
    for page in ("data", "privacy", "benchmarks/LEADERBOARD", "examples/own_tables", "provisioning"):  # README: index
        assert (site / page / "index.html").is_file(), page


def test_the_readme_is_short_and_starts_with_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 150
    assert lines[3].startswith("bash scripts/run_default_job.sh") and lines[4].startswith("bash scripts/run_tests.sh")
