"""Defenses a party enforces itself, whatever the job asks: the `enforce` object of its local/vflflare.json,

    {"data_root": "/data/vfl", "enforce": {"representation_noise": 0.5}}

A noise setting is a floor and an epsilon a ceiling: the party uses the stricter of the job's value and its
own. A party enforces only what it applies itself to what it sends:
- a site (feature party): `representation_noise` on every representation it uploads, scoring included;
- the label party (the server with `label_owner: server`, or the label-owning site): `label_dp_epsilon`
  (randomized response on its labels), and `gradient_noise` or `gradient_dp_epsilon` on the gradients it sends
  the sites (those need the job's `gradient_clip`: the noise is a multiple of it).
A defense on a channel the job's algorithm does not have is moot and skipped. One the party does not apply in
this job (label DP at a party that does not hold the labels) is an error naming the file and the key.

The job's results record what each party's file changed, under `privacy.enforced`:
`{party: {key: {"job": <the job's value>, "enforced": <the one used>, "by": "<party> local/vflflare.json"}}}`;
the label party's DP accounting is computed from the values used. The file never travels; only that record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vflflare.config import LABEL_CHANNELS, SERVER, JobConfig
from vflflare.data.errors import DataError, site_owner

ENFORCE_KEY = "enforce"  # in the party's local/vflflare.json
SITE_ROLE, LABEL_ROLE = "site", "label party"
FLOOR, CEILING = "floor", "ceiling"
# key -> (who applies it, which way is stricter); a ceiling of 0 would mean "off", so every value is > 0
ENFORCEABLE: dict[str, tuple[str, str]] = {
    "representation_noise": (SITE_ROLE, FLOOR),
    "label_dp_epsilon": (LABEL_ROLE, CEILING),
    "gradient_noise": (LABEL_ROLE, FLOOR),
    "gradient_dp_epsilon": (LABEL_ROLE, CEILING),
}
_SITE_KEYS = [k for k, (role, _) in ENFORCEABLE.items() if role == SITE_ROLE]
_LABEL_KEYS = [k for k, (role, _) in ENFORCEABLE.items() if role == LABEL_ROLE]
_WHO = (
    f"a site enforces {', '.join(_SITE_KEYS)} on what it uploads; the label party {', '.join(_LABEL_KEYS)} "
    f"on what it sends computed from its labels"
)


@dataclass(frozen=True)
class Enforcement:
    """One party's enforced defenses, read from `path`."""

    party: str  # a site's name, or "server"
    values: dict[str, float]
    path: str

    @property
    def by(self) -> str:
        return f"{self.party} local/vflflare.json"

    def error(self, key: str, problem: str) -> DataError:
        return DataError.at(site_owner(self.party), self.path, f"'{ENFORCE_KEY}.{key}' {problem}")


def parse_enforcement(value: Any, path: str | Path, party: str) -> Enforcement | None:
    """The `enforce` object of `party`'s local/vflflare.json at `path` (None or {}: nothing enforced). An
    unknown key, a value that is not a number > 0, or a defense the party never applies is an error naming the
    file and the key."""
    if value in (None, {}):
        return None
    owner = site_owner(party)
    if not isinstance(value, dict):
        raise DataError.at(
            owner, path, f"'{ENFORCE_KEY}' must be an object like {{\"representation_noise\": 0.5}}, got {value!r}"
        )
    found = Enforcement(party, {}, str(path))
    for key, number in value.items():
        if key not in ENFORCEABLE:
            raise found.error(key, f"is not a defense a party can enforce: {_WHO}")
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number) or number <= 0:
            kind = "a noise floor" if ENFORCEABLE[key][1] == FLOOR else "an epsilon ceiling"
            raise found.error(key, f"must be a number > 0 ({kind}), got {number!r}")
        if party == SERVER and ENFORCEABLE[key][0] == SITE_ROLE:
            raise found.error(
                key, f"is a site's defense: the server uploads no representations, so it cannot apply it ({_WHO})"
            )
        found.values[key] = float(number)
    return found


def _record(enforcement: Enforcement, job: float, used: float) -> dict[str, Any]:
    return {"job": job, "enforced": used, "by": enforcement.by}


def apply_enforcement(
    cfg: JobConfig, enforcement: Enforcement | None, *, hosts_label: bool, hosts_site: bool
) -> tuple[JobConfig, dict[str, dict[str, Any]]]:
    """The config this party runs the job with (the job's, each enforced defense made the stricter of the two)
    and the record of what its file changed (empty: nothing; then `cfg` itself is returned).
    hosts_label / hosts_site: the party holds the job's labels / is a feature site in it."""
    if enforcement is None or not enforcement.values:
        return cfg, {}
    values, channels = enforcement.values, cfg.privacy_channels
    has = {
        "representation_noise": "representations" in channels,
        "label_dp_epsilon": bool(channels & LABEL_CHANNELS),
        "gradient_noise": "gradients" in channels,
        "gradient_dp_epsilon": "gradients" in channels,
    }
    for key in values:
        role = ENFORCEABLE[key][0]
        if has[key] and not (hosts_label if role == LABEL_ROLE else hosts_site):
            held = f"this job's label party is '{cfg.label_owner}'" if role == LABEL_ROLE else "it is no site"
            raise enforcement.error(
                key,
                f"is a defense of the {role}, which '{enforcement.party}' is not in this job "
                f"({held}), so it cannot apply it. A party enforces only the defenses it "
                f"applies itself: {_WHO}",
            )
    changes: dict[str, float] = {}
    records: dict[str, dict[str, Any]] = {}
    floor = values.get("representation_noise")
    if floor and has["representation_noise"] and floor > cfg.representation_noise:
        changes["representation_noise"] = floor
        records["representation_noise"] = _record(enforcement, cfg.representation_noise, floor)
    ceiling = values.get("label_dp_epsilon")
    if ceiling and has["label_dp_epsilon"] and (cfg.label_dp_epsilon == 0 or ceiling < cfg.label_dp_epsilon):
        changes["label_dp_epsilon"] = ceiling
        records["label_dp_epsilon"] = _record(enforcement, cfg.label_dp_epsilon, ceiling)
    if has["gradient_noise"] and ("gradient_noise" in values or "gradient_dp_epsilon" in values):
        grad_changes, grad_records = _gradient_noise(cfg, enforcement)
        changes.update(grad_changes)
        records.update(grad_records)
    if not changes:
        return cfg, {}
    return type(cfg).from_dict({**cfg.to_dict(), **changes}), records


def _gradient_noise(cfg: JobConfig, enforcement: Enforcement) -> tuple[dict[str, float], dict[str, dict]]:
    """The stricter gradient noise of the job's and the party's: the largest noise multiplier among the job's
    (gradient_noise, or the one its gradient_dp_epsilon gives over the planned passes), the enforced
    gradient_noise and the one the enforced gradient_dp_epsilon gives."""
    from vflflare.privacy.accounting import noise_for_epsilon  # noqa: PLC0415 - dp-accounting only when needed

    floor, ceiling = enforcement.values.get("gradient_noise"), enforcement.values.get("gradient_dp_epsilon")
    if cfg.gradient_clip <= 0:
        key = "gradient_noise" if floor else "gradient_dp_epsilon"
        raise enforcement.error(
            key,
            "needs the job's gradient_clip > 0 (the noise std is a multiple of it), and "
            "this job sends the gradients unclipped: set gradient_clip in the job "
            "(1 with gradient_normalize: true works on any data)",
        )

    def multiplier(epsilon: float) -> float:
        return noise_for_epsilon(epsilon, cfg.gradient_passes, cfg.gradient_dp_delta)

    best, best_z = None, multiplier(cfg.gradient_dp_epsilon) if cfg.gradient_dp_epsilon else cfg.gradient_noise
    if floor and floor > best_z:
        best, best_z = "gradient_noise", floor
    if ceiling and (not cfg.gradient_dp_epsilon or ceiling < cfg.gradient_dp_epsilon):
        z = multiplier(ceiling)
        if z > best_z:
            best, best_z = "gradient_dp_epsilon", z
    if best == "gradient_noise":
        return (
            {"gradient_noise": floor, "gradient_dp_epsilon": 0.0},
            {"gradient_noise": _record(enforcement, cfg.gradient_noise, floor)},
        )
    if best == "gradient_dp_epsilon":
        return (
            {"gradient_dp_epsilon": ceiling, "gradient_noise": 0.0},
            {"gradient_dp_epsilon": _record(enforcement, cfg.gradient_dp_epsilon, ceiling)},
        )
    return {}, {}


def enforced_floor(enforcement: Enforcement | None, key: str, job: float) -> tuple[float, dict[str, Any] | None]:
    """A floor applied outside a job's setup (a scoring job's representation noise): the value used and the
    record, None when the job's was at least as strict."""
    floor = enforcement.values.get(key) if enforcement is not None else None
    if not floor or floor <= job:
        return job, None
    return floor, _record(enforcement, job, floor)


def collect_enforced(report: dict, replies: dict, sites: list[str]) -> None:
    """The coordinator's side: what each site's local configuration enforced (its setup reply says so only then)
    into the job's report under "enforced", for the results' privacy.enforced."""
    found = {site: replies[site]["enforced"] for site in sites if "enforced" in replies[site]}
    if found:
        report["enforced"] = found
