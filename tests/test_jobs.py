"""The committed job folders are exactly what the generator writes."""

import filecmp
from pathlib import Path

from vflflare.jobs import default_jobs, write_default_jobs

JOBS = Path(__file__).resolve().parents[1] / "jobs"


def test_committed_jobs_match_the_generator(tmp_path):
    write_default_jobs(tmp_path)
    for name in default_jobs():
        generated = sorted(p.relative_to(tmp_path / name) for p in (tmp_path / name).rglob("*") if p.is_file())
        committed = sorted(p.relative_to(JOBS / name) for p in (JOBS / name).rglob("*") if p.is_file())
        assert generated == committed, f"jobs/{name}: files differ; run `vflflare jobs`"
        for rel in generated:
            assert filecmp.cmp(tmp_path / name / rel, JOBS / name / rel, shallow=False), (
                f"jobs/{name}/{rel} differs from the generator; run `vflflare jobs`"
            )


def test_bundled_code_is_the_package_under_custom(tmp_path):
    from vflflare.recipes import VFLRecipe

    VFLRecipe(algorithm="fewshot", bundle_code=True).export(str(tmp_path))
    custom = tmp_path / "fewshot_vfl" / "app" / "custom"
    assert sorted(p.name for p in custom.iterdir()) == ["vflflare"]
    assert (custom / "vflflare" / "registry.py").is_file()
    assert (custom / "vflflare" / "algorithms" / "fewshot.py").is_file()
    assert not list(custom.rglob("__pycache__"))
