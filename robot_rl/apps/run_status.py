"""`robot-rl status RUN_DIR`: what a ROS training run is doing, from the status files its nodes write every second.

The learner node writes ``learner_status.json`` in its run_dir; each actor writes the file its ``stats_path`` names
(``actor_status.json`` in the run_dir for the shipped launch files; any name, e.g. one per robot namespace). Files are
found by what they hold, in the run folder and the folders just below it (a learner in ``RUN_DIR/learner``). A file
not rewritten for STALE_AFTER_S seconds by a node that did not finish is marked stale (the node is gone or hung).
Nothing here needs ROS: the run folder is the live view of the graph.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from robot_rl.core.report import percent

STALE_AFTER_S = 5.0
MAX_STATUS_BYTES = 4 << 20
SKIPPED_FOLDERS = {"checkpoint", "checkpoint.old", "checkpoint.replay", "transition_log", "jax_cache", "tensorboard",
                   "validation", "eval"}
LEARNER_KEYS = {"received", "acks", "learner_ready"}
ACTOR_KEYS = {"source", "commands", "transitions"}


def _read(path: Path) -> dict | None:
    try:
        if path.stat().st_size > MAX_STATUS_BYTES:
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # gone, or being replaced (files are replaced atomically: a retry reads it)
        return None
    return data if isinstance(data, dict) else None


def find_status_files(run_dir: str | Path) -> tuple[list[tuple[Path, dict]], list[tuple[Path, dict]]]:
    """(learner status files, actor status files) of a run folder, each as (path, contents)."""
    run_dir = Path(run_dir)
    candidates = sorted(run_dir.glob("*.json"))
    for folder in sorted(p for p in run_dir.iterdir() if p.is_dir()):
        if folder.name not in SKIPPED_FOLDERS and not folder.name.endswith(".zarr"):
            candidates += sorted(folder.glob("*.json"))
    learners, actors = [], []
    for path in candidates:
        data = _read(path)
        if data is None:
            continue
        if LEARNER_KEYS <= data.keys():
            learners.append((path, data))
        elif ACTOR_KEYS <= data.keys():
            actors.append((path, data))
    return learners, actors


def _age(data: Mapping[str, Any], path: Path, now: float) -> float:
    written = data.get("time")
    if not isinstance(written, (int, float)):
        written = path.stat().st_mtime
    return max(0.0, now - float(written))


def _node(kind: str, name: str, path: Path, run_dir: Path, data: Mapping[str, Any], now: float, finished: bool,
          state: str, rates: Mapping[str, float], holds: Mapping[str, Any]) -> dict[str, Any]:
    age = _age(data, path, now)
    return {"node": kind, "name": name, "file": str(path.relative_to(run_dir)), "age_s": round(age, 1),
            "stale": age > STALE_AFTER_S and not finished, "finished": finished, "state": state,
            "rates": dict(rates or {}), "holds": dict(holds)}


def read_run_status(run_dir: str | Path, now: float | None = None) -> dict[str, Any]:
    """Everything `robot-rl status` shows, as JSON-ready data. ValueError if `run_dir` is not a folder or holds no
    status file."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: no such run folder")
    now = time.time() if now is None else now
    learners, actors = find_status_files(run_dir)
    if not learners and not actors:
        raise ValueError(f"{run_dir} holds no learner or actor status file (learner_status.json, an actor's "
                         "stats_path): is it the run_dir of a ROS launch?")
    config = _read(run_dir / "config.json") or {}
    status: dict[str, Any] = {"run_dir": str(run_dir), "time": now, "task": config.get("task"),
                              "obs_mode": config.get("obs_mode"), "nodes": [], "learner": None, "robots": []}
    robots: dict[str, dict[str, Any]] = {}
    for path, data in learners:
        phase = data.get("phase") or ("training" if data.get("learner_ready") else "starting")
        worker = data.get("worker") or {}
        if worker.get("job"):
            done, total = worker.get("progress") or (0, 0)
            phase = f"{phase}; {worker['job']} {done}/{total}"
        status["nodes"].append(_node("learner", "learner", path, run_dir, data, now, data.get("phase") == "done",
                                     phase, data.get("rates") or {}, {}))
        status["learner"] = {"phase": data.get("phase") or phase.split(";")[0]} | {key: data.get(key) for key in (
            "received", "trained_on", "budget", "updates", "weights_version", "episodes", "successes",
            "interventions", "rejected", "eval_every", "evals", "last_eval", "rates", "result")}
        for robot, row in (data.get("robots") or {}).items():
            robots.setdefault(robot, {}).update(
                robot=robot, episodes=row["episodes"], successes=row["successes"], success_rate=row["success_rate"],
                intervention_rate=row["intervention_rate"], recent_success_rate=row.get("recent_success_rate"),
                counted_by="learner")
    for path, data in actors:
        robot = str(data["source"]).split("/", 1)[0]
        holds = {"held": data.get("held", 0), **(data.get("holds") or {})}
        waiting = data.get("waiting_for")
        state = "done" if data.get("done") else (f"waiting for {waiting}" if waiting else str(data.get("phase")))
        finished = bool(data.get("done") or data.get("learner_done"))  # done, or nothing left to train on
        status["nodes"].append(_node("actor", robot, path, run_dir, data, now, finished, state,
                                     data.get("rates") or {}, holds))
        entry = robots.setdefault(robot, {"robot": robot})
        episodes, steps = int(data.get("episodes", 0)), int(data.get("steps", 0))
        if "counted_by" not in entry:  # the learner's count (over every run of the actor) wins; else the actor's
            successes = int(data.get("successes", 0))
            entry.update(episodes=episodes, successes=successes,
                         success_rate=successes / episodes if episodes else None,
                         intervention_rate=int(data.get("interventions", 0)) / steps if steps else None,
                         counted_by="actor")
        entry.update(transitions=data.get("transitions"), acked_through=data.get("acked_through"),
                     outbox=data.get("outbox"), weights_version=data.get("weights_version"),
                     waits_s=data.get("waits_s") or {})
    status["robots"] = [robots[name] for name in sorted(robots)]
    return status


def _rate_text(rates: Mapping[str, float]) -> str:
    names = {"received_per_s": "received/s", "updates_per_s": "updates/s", "transitions_per_s": "steps/s",
             "commands_per_s": "commands/s"}
    return ", ".join(f"{value:.1f} {names.get(key, key)}" for key, value in rates.items()) or "-"


def _holds_text(holds: Mapping[str, Any]) -> str:
    held = int(holds.get("held", 0) or 0)
    reasons = sorted(((k, v) for k, v in holds.items() if k != "held" and v), key=lambda kv: -kv[1])
    if not held and not reasons:
        return "0"
    return f"{held}" + (f" ({', '.join(f'{k} {v}' for k, v in reasons[:2])})" if reasons else "")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    return ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
            for row in (header, *rows)]


def _rate(value: float | None) -> str:
    return "-" if value is None else percent(value)


def format_status(status: Mapping[str, Any]) -> str:
    """The compact table `robot-rl status` prints."""
    what = ", ".join(str(status[k]) for k in ("task", "obs_mode") if status.get(k))
    lines = [f"run {status['run_dir']}" + (f" ({what})" if what else "")]
    learner = status.get("learner")
    if learner:
        budget = learner.get("budget") or 0
        trained = learner.get("trained_on")
        progress = f"{trained}/{budget} ({trained / budget:.0%})" if budget and trained is not None else str(trained)
        last = learner.get("last_eval")
        evaluation = (f"{percent(last['success_rate'])} ({last['successes']}/{last['episodes']}) at env step "
                      f"{last['env_step']}" if last else "none yet" if learner.get("eval_every") else "none (off)")
        lines.append(f"learner: {learner.get('phase')}; trained on {progress} transitions, received "
                     f"{learner.get('received')}, updates {learner.get('updates')}, weights v"
                     f"{learner.get('weights_version')}; last eval {evaluation}")
    lines.append("")
    node_rows = []
    for node in status["nodes"]:
        age = f"{node['age_s']:.1f} s" + (" STALE" if node["stale"] else "")
        node_rows.append([f"{node['node']} {node['name']}" if node["node"] != node["name"] else node["node"],
                          node["file"], age, node["state"], _rate_text(node["rates"]),
                          _holds_text(node["holds"]) if node["node"] == "actor" else "-"])
    lines += _table(["node", "status file", "age", "state", "rate", "holds"], node_rows)
    if status["robots"]:
        lines.append("")
        robot_rows = [[r["robot"], str(r.get("episodes", "-")), _rate(r.get("success_rate")),
                       _rate(r.get("recent_success_rate")), _rate(r.get("intervention_rate")),
                       str(r.get("transitions", "-")), str(r.get("acked_through", "-")),
                       f"v{r['weights_version']}" if r.get("weights_version") is not None else "-"]
                      for r in status["robots"]]
        lines += _table(["robot", "episodes", "success", "last 20", "interventions", "transitions", "acked",
                         "weights"], robot_rows)
    return "\n".join(lines)


def watch(run_dir: str | Path, every_s: float | None, as_json: bool, write=print, sleep=time.sleep,
          clear: bool = False) -> None:
    """Print the status once, or every `every_s` seconds until interrupted (a terminal is cleared between)."""
    while True:
        status = read_run_status(run_dir)
        text = json.dumps(status) if as_json else format_status(status)
        write(("\x1b[H\x1b[2J" if clear else "") + text)
        if not every_s:
            return
        sleep(every_s)
