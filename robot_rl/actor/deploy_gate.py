"""The deployment gate: the validation records kept next to a policy, and whether they let it drive a robot.

`robot-rl validate` (robot_rl.sim.validation) runs a policy through a suite of conditions in the sim mirror and
writes a record next to the policy: the policy's and the robot file's sha256, the suite's, its thresholds and the
verdict. Before a real robot runs a policy, the actor asks :func:`deployment_decision`: only records for these exact
bytes and the robot file's own suite count, and a PASS admits only if it was judged with the robot file's thresholds
or tighter ones. Everything here reads files and YAML only (no MuJoCo): the suite's conditions are the sim's part.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from robot_rl.core.files import atomic_write_text

RECORD_FORMAT = "robot_rl.validation"
RECORD_VERSION = 1
THRESHOLD_KEYS = ("min_success", "max_drop", "min_episodes")


@dataclasses.dataclass(frozen=True)
class SuiteTerms:
    """What the gate knows of a validation suite: its name, file, sha256 and the thresholds of its verdict."""

    name: str
    min_success: float = 0.8
    """Success rate every condition must reach."""
    max_drop: float = 0.2
    """Largest success-rate loss (absolute) against nominal a condition may have."""
    min_episodes: int = 20
    """Fewest episodes per condition a passing verdict may rest on."""
    path: str = ""
    sha256: str = ""

    @property
    def thresholds(self) -> dict[str, Any]:
        """min_success, max_drop and min_episodes (what a record stores as the thresholds of its verdict)."""
        return {key: getattr(self, key) for key in THRESHOLD_KEYS}

    @property
    def label(self) -> str:
        """The suite's file name (default.yaml), as the gate's messages name it."""
        return Path(self.path).name if self.path else f"{self.name}.yaml"


def looser(key: str, value: float, reference: float) -> bool:
    """Whether threshold `key` at `value` asks less than at `reference` (a lower min_success or min_episodes, a higher
    max_drop)."""
    return value > reference if key == "max_drop" else value < reference


def tightened(terms: SuiteTerms, validation) -> SuiteTerms:
    """`terms` with the thresholds a robot file's `validation` section (a
    robot_rl.actor.robot_config.ValidationConfig) tightens; a looser value there changes nothing."""
    tighter = {}
    for key in THRESHOLD_KEYS:
        value = getattr(validation, key)
        if value is not None and looser(key, getattr(terms, key), value):
            tighter[key] = value
    return dataclasses.replace(terms, **tighter)


def shipped_suites_dir() -> Path:
    """The shipped suites' folder (found without importing robot_rl.sim, which loads MuJoCo)."""
    import importlib.util

    return Path(importlib.util.find_spec("robot_rl.sim").submodule_search_locations[0]) / "suites"


def read_suite_file(name_or_path: str | Path) -> tuple[Mapping[str, Any], str, str]:
    """A suite file's YAML mapping, its text and where it was read; ValueError names what is wrong."""
    path = Path(name_or_path)
    if not path.suffix:
        shipped = shipped_suites_dir() / f"{name_or_path}.yaml"
        if not shipped.is_file():
            names = sorted(p.stem for p in shipped_suites_dir().glob("*.yaml"))
            raise ValueError(f"no suite {str(name_or_path)!r}: give a YAML file or one of {', '.join(names)}")
        path = shipped
    try:
        text, where = path.read_text(), str(path)
    except OSError as error:
        raise ValueError(f"suite file {path}: {error.strerror or error}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"suite file {where} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"suite file {where}: expected a mapping with `name` and `conditions`")
    unknown = sorted(set(data) - {"name", "description", "episodes", "seed", "thresholds", "conditions"})
    if unknown:
        raise ValueError(f"suite file {where}: unknown keys {', '.join(unknown)}")
    return data, text, where


def checked_thresholds(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The checked `thresholds` of a suite file's mapping, defaults filled in; ValueError names what is wrong."""
    thresholds = data.get("thresholds") or {}
    unknown = sorted(set(thresholds) - set(THRESHOLD_KEYS)) if isinstance(thresholds, Mapping) else ["?"]
    if unknown:
        raise ValueError(f"suite file {where}: thresholds take {', '.join(THRESHOLD_KEYS)}")
    values = {k: thresholds.get(k, default) for k, default in (("min_success", 0.8), ("max_drop", 0.2))}
    for key, value in values.items():
        if not (isinstance(value, (int, float)) and 0 <= value <= 1):
            raise ValueError(f"suite file {where}: thresholds.{key}={value!r} must be in [0, 1]")
    min_episodes = thresholds.get("min_episodes", 20)
    if not (isinstance(min_episodes, int) and min_episodes >= 1):
        raise ValueError(f"suite file {where}: thresholds.min_episodes={min_episodes!r} must be an integer >= 1")
    return {"min_success": float(values["min_success"]), "max_drop": float(values["max_drop"]),
            "min_episodes": min_episodes}


def suite_thresholds(name_or_path: str | Path) -> dict[str, Any]:
    """A suite's thresholds (min_success, max_drop, min_episodes), read without its conditions (no MuJoCo)."""
    data, _, where = read_suite_file(name_or_path)
    return checked_thresholds(data, where)


def suite_terms(name_or_path: str | Path) -> SuiteTerms:
    """A shipped suite by name or a suite YAML file, as the gate reads it; ValueError names what is wrong."""
    return suite_terms_of(*read_suite_file(name_or_path))


def suite_terms_of(data: Mapping[str, Any], text: str, where: str) -> SuiteTerms:
    """The terms of a suite file already read (:func:`read_suite_file`'s mapping, text and location)."""
    return SuiteTerms(str(data.get("name") or Path(where).stem), **checked_thresholds(data, where), path=where,
                      sha256=hashlib.sha256(text.encode()).hexdigest())


# ----- hashes and the records -----------------------------------------------------------------------------------

def file_digest(path: str | Path, names: Sequence[str] = ()) -> str:
    """sha256 of a file, or of the files `names` in a folder (each name and its contents)."""
    path = Path(path)
    digest = hashlib.sha256()
    if not path.is_dir():
        digest.update(path.read_bytes())
    for name in sorted(names):
        digest.update(name.encode() + b"\0" + (path / name).read_bytes())
    return digest.hexdigest()


def policy_location(path: str | Path) -> Path:
    """The policy folder or policy file `path` stands for (a run folder stands for its policy)."""
    from robot_rl.policies.checkpoint import find_policy_folder
    from robot_rl.wire.policy_file import resolve_policy_path

    folder = find_policy_folder(path)
    return folder if folder is not None else resolve_policy_path(path)


def policy_digest(path: str | Path) -> str:
    """sha256 of what the policy at `path` acts with, plus a head's frozen base. A policy folder counts only the
    files its loader reads: what the validation record (and anything else kept beside them) attests is not part
    of what it attests."""
    from robot_rl.policies.checkpoint import POLICY_CONFIG, POLICY_WEIGHTS

    located = policy_location(path)
    if located.is_dir():
        return file_digest(located, (POLICY_CONFIG, POLICY_WEIGHTS))
    digest = file_digest(located)
    from robot_rl.wire.policy_file import read_policy_file

    base = (read_policy_file(located).policy_config or {}).get("base")
    if base:
        digest = hashlib.sha256((digest + policy_digest(base)).encode()).hexdigest()
    return digest


def record_path(policy: str | Path) -> Path:
    """Where the validation records of the policy at `policy` live (next to it)."""
    located = policy_location(policy)
    return located / "validation.json" if located.is_dir() else located.with_name(located.name + ".validation.json")


def read_records(policy: str | Path) -> list[dict[str, Any]]:
    """The validation records next to a policy ([] when there are none or the file is unreadable)."""
    try:
        data = json.loads(record_path(policy).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(data, Mapping) or data.get("format") != RECORD_FORMAT:
        return []
    return [r for r in data.get("records", []) if isinstance(r, Mapping)]


def record_time(record: Mapping[str, Any]) -> float:
    """When a record was made (its validated_at, seconds since the epoch; -inf when it does not say)."""
    try:
        return datetime.datetime.fromisoformat(str(record.get("validated_at"))).timestamp()
    except ValueError:
        return float("-inf")


def newest_record(records: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The newest of `records` (by validated_at, then by place in the file: records are kept in time order)."""
    return max(enumerate(records), key=lambda item: (record_time(item[1]), item[0]))[1]


def write_record(policy: str | Path, record: Mapping[str, Any]) -> Path:
    """Add `record` to the policy's records (replacing one for the same robot file and suite), in time order; atomic."""
    path = record_path(policy)
    kept = [r for r in read_records(policy)
            if (r.get("robot_sha256"), r.get("suite_sha256")) != (record["robot_sha256"], record["suite_sha256"])]
    records = sorted(kept + [dict(record)], key=record_time)  # stable: records of the same time keep their order
    data = {"format": RECORD_FORMAT, "version": RECORD_VERSION, "records": records}
    return atomic_write_text(path, json.dumps(data, indent=2))


def record_label(record: Mapping[str, Any]) -> str:
    """The suite file a record was judged with (lenient.yaml), as the gate's messages name it."""
    path = record.get("suite_path")
    return Path(str(path)).name if path else f"{record.get('suite', '?')}.yaml"


def record_line(record: Mapping[str, Any]) -> str:
    """One line on a record: suite, date, verdict and successes per condition."""
    conditions = ", ".join(f"{c.get('condition')} {c.get('successes')}/{c.get('episodes')}"
                           for c in record.get("conditions") or [] if isinstance(c, Mapping))
    return (f"suite {record.get('suite', '?')} ({record_label(record)}), validated {record.get('validated_at', '?')}, "
            f"{str(record.get('verdict', '?')).upper()}: {conditions or 'no per-condition results'}")


def _looser_than(judged: Any, required: Mapping[str, Any]) -> str:
    """What of the `judged` thresholds (a record's) asks less than `required` ('' when none does)."""
    if not isinstance(judged, Mapping):
        return "the record holds no thresholds"
    loose = [f"{key} {judged.get(key)} where the robot file asks {required[key]}" for key in THRESHOLD_KEYS
             if not isinstance(judged.get(key), (int, float)) or looser(key, judged[key], required[key])]
    return ", ".join(loose)


def _other_suites(records: Sequence[Mapping[str, Any]], suite: SuiteTerms) -> str:
    """The newest record of each other suite in `records`, as 'lenient.yaml (PASS), ...'."""
    by_suite: dict[Any, list[Mapping[str, Any]]] = {}
    for record in records:
        by_suite.setdefault(record.get("suite_sha256"), []).append(record)
    named = []
    for group in by_suite.values():
        record = newest_record(group)
        label = record_label(record)
        label = f"another version of {label}" if label == suite.label else label
        named.append(f"{label} ({str(record.get('verdict', '?')).upper()})")
    return ", ".join(named)


def deployment_decision(policy: str | Path, robot: str | Path,
                        task: str | None = None) -> tuple[str | None, dict[str, Any] | None]:
    """The deployment gate: (why the policy at `policy` may not drive the real robot of robot file `robot`, or None;
    the record that admits it, or None). Only records for this policy's bytes, this robot file's bytes and the robot
    file's suite count; the newest of them decides, and a PASS admits only if judged with the robot file's
    thresholds or tighter ones."""
    from robot_rl.actor.robot_config import load_validation_config, resolve_robot_path

    located = policy_location(policy)
    robot_path = resolve_robot_path(robot)
    validation, location = load_validation_config(robot_path)
    suite = tightened(suite_terms(location), validation)
    robot_sha, policy_sha = file_digest(robot_path), policy_digest(located)
    command = f"robot-rl validate --policy {located} --robot {robot_path}" + (f" --task {task}" if task else "")
    anyway = "or set allow_unvalidated:=true to run it anyway (logged)"
    records = [r for r in read_records(located) if r.get("robot_sha256") == robot_sha]
    current = [r for r in records if r.get("policy_sha256") == policy_sha]
    judged = [r for r in current if r.get("suite_sha256") == suite.sha256]
    others = _other_suites([r for r in current if r.get("suite_sha256") != suite.sha256], suite)
    requires = f"robot file {robot_path.name} requires {suite.label}"
    if judged:
        record = newest_record(judged)
        loose = _looser_than(record.get("thresholds"), suite.thresholds)
        if record.get("verdict") == "pass" and not loose:
            return None, dict(record)
        if record.get("verdict") == "pass":
            return (f"policy {located} passed {suite.label} for robot file {robot_path} with thresholds looser than "
                    f"the robot file's ({loose}): validate it again ({command}), {anyway}"), None
        reasons = "; ".join(record.get("verdict_reasons") or ["failed"])
        also = f"; not counted: {others}, as {requires}" if others else ""
        return (f"policy {located} failed its validation with {suite.label} for robot file {robot_path} ({reasons}; "
                f"report {record.get('report')}{also}): retrain it and validate again ({command}), {anyway}"), None
    if current:
        return f"policy {located} was validated with {others}; {requires}: {command}, {anyway}", None
    what = "changed since it was validated" if records else "has no validation record"
    return (f"policy {located} {what} for robot file {robot_path}: validate it in the sim mirror first ({command}), "
            f"{anyway}"), None


def deployment_problem(policy: str | Path, robot: str | Path, task: str | None = None) -> str | None:
    """Why the policy at `policy` may not drive the real robot of robot file `robot`, or None when it may (the
    deployment gate: `deployment_decision` without the admitting record)."""
    return deployment_decision(policy, robot, task)[0]

