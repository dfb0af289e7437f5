"""The job folders in jobs/ are exported recipes, never hand-edited: `vflflare jobs` writes them
(one per plug-in that names a `job_name`, plus jobs/psi), and a test checks the committed ones match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vflflare.config import JobConfig
from vflflare.registry import algorithms

PSI_JOB = "psi"


def export(recipe: Any, out_dir: str | Path) -> Path:
    recipe.export(str(out_dir))
    return Path(out_dir) / recipe.name


def write_job(
    out_dir: str | Path,
    name: str,
    overrides: dict[str, Any],
    min_sites: int | None = None,
    psi: bool = False,
    **recipe_args: Any,
) -> Path:
    """Export a VFLRecipe with these settings (overrides: the job's config, with "algorithm"; recipe_args:
    more VFLRecipe arguments, such as sites=[...])."""
    from vflflare.recipes import VFLRecipe

    config = dict(overrides)
    algorithm = config.pop("algorithm", JobConfig.algorithm)
    if psi and config.get("alignment", "psi") != "psi":
        raise ValueError(f"a job with a PSI phase aligns with it: alignment must be 'psi', not {config['alignment']!r}")
    config.pop("alignment", None) if psi else None
    recipe = VFLRecipe(name=name, algorithm=algorithm, min_clients=min_sites, config=config, psi=psi, **recipe_args)
    return export(recipe, out_dir)


def write_psi_job(
    out_dir: str | Path, name: str = PSI_JOB, min_sites: int | None = None, sites: list[str] | None = None
) -> Path:
    from vflflare.recipes import PSIRecipe

    return export(PSIRecipe(name=name, min_clients=min_sites, sites=sites), out_dir)


def expected_sites(job_folder: str | Path) -> tuple[int, list[str]]:
    """How many sites an exported job needs and, when it names them, which (its VFL or PSI controller's
    min_sites and config "sites"; meta.json's min_clients is always 2, see recipes/vfl.py)."""
    import json

    count, names = 2, []
    for config in Path(job_folder).glob("*/config/config_fed_server.json"):
        for workflow in json.loads(config.read_text()).get("workflows", []):
            args = workflow.get("args", {})
            names = args.get("config", {}).get("sites") or args.get("sites") or names
            count = max(count, args.get("min_sites", 2), len(names))
    return count, names


def name_sites(job_folder: str | Path, sites: list[str]) -> Path:
    """Make an exported job name its sites, in place: its deploy map (NVFlare deploys it to the server and
    these sites only, instead of every connected site) and its VFL and PSI controllers' "sites" (the
    coordinator refuses, by name and before it sends anything, any other site). A job that names other
    sites already is an error."""
    import json

    from vflflare.protocol.topology import check_unique

    sites = check_unique(sites, "the job's sites")
    _, named = expected_sites(job_folder)
    if named and sorted(named) != sorted(sites):
        raise ValueError(f"{Path(job_folder).name} names its sites {named}, not {sites}")
    for path in Path(job_folder).glob("*/config/config_fed_server.json"):
        config = json.loads(path.read_text())
        for workflow in config.get("workflows", []):
            if workflow.get("path", "").endswith("VFLController"):
                workflow.setdefault("args", {}).setdefault("config", {})["sites"] = sites
            elif workflow.get("path", "").endswith("VFLPSIController"):
                workflow.setdefault("args", {})["sites"] = sites
        path.write_text(json.dumps(config, indent=4))
    meta_file = Path(job_folder) / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["deploy_map"] = {
        app: ["server", *sites] if "@ALL" in targets else targets for app, targets in meta.get("deploy_map", {}).items()
    }
    meta_file.write_text(json.dumps(meta, indent=4))
    return Path(job_folder)


def default_jobs() -> dict[str, str]:
    """jobs/ folder name -> algorithm, for every plug-in that ships a job."""
    return {plugin.job_name: name for name, plugin in algorithms().items() if plugin.job_name}


def write_default_jobs(out_dir: str | Path) -> list[Path]:
    """Package defaults; a plug-in whose labels must be at a site gets the first of `--sites 2`'s names."""
    from vflflare.data.split import parse_sites

    def defaults(algorithm: str) -> dict[str, Any]:
        owner = {"label_owner": parse_sites("2")[0]} if algorithms()[algorithm].setup.active_site_labels else {}
        return {"algorithm": algorithm, **owner}

    jobs = [write_job(out_dir, job, defaults(algorithm)) for job, algorithm in default_jobs().items()]
    return jobs + [write_psi_job(out_dir)]


def job_files(name: str, overrides: dict[str, Any], min_sites: int | None = None, psi: bool = False) -> dict[str, Any]:
    """The JSON files of the job `write_job` would export, by path relative to the job folder."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        root = write_job(out, name, overrides, min_sites, psi)
        return {str(p.relative_to(root)): json.loads(p.read_text()) for p in root.rglob("*.json")}
