"""Watching a ROS run without ROS: the learner's evaluation schedule and worker, the size of its final validation, its
progress line and rates (robot_rl.learner.evaluations), the final-weights mark actors read, and `robot-rl status` on a run
folder (robot_rl.apps.run_status). The graph end to end: tests/test_launch.py (sim_train / sim_eval)."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from robot_rl.learner.evaluations import (AUTO, EvalWorker, RateWindow, eval_due, progress_line,
                                    resolve_eval_every, robot_summary, validation_episodes)
from robot_rl.apps.run_status import STALE_AFTER_S, format_status, read_run_status, watch


# ----- the evaluation schedule -------------------------------------------------------------------------------------

def test_eval_every_is_sized_to_the_budget():
    assert resolve_eval_every(AUTO, 1500) == 300 and resolve_eval_every(AUTO, 3) == 1
    assert resolve_eval_every(AUTO, 0) == 0  # no budget: off unless asked
    assert resolve_eval_every(0, 1500) == 0 and resolve_eval_every(250, 0) == 250


def test_evaluations_fall_due_as_in_process_training_and_never_at_the_budget():
    def schedule(every, budget, steps):
        last, done = None, []
        for step in steps:
            if eval_due(step, last, every, budget):
                last = step
                done.append(step)
        return done

    assert schedule(40, 200, range(0, 201)) == [0, 40, 80, 120, 160]  # 200: the final evaluation's
    # A busy worker: the evaluation owed at 40 starts when it is free (at 47), the next at 80 still falls due.
    assert schedule(40, 200, [0, 10, 47, 60, 79, 85, 200]) == [0, 47, 85]
    assert schedule(0, 200, range(0, 201)) == []
    assert schedule(50, 0, range(0, 120, 7)) == [0, 56, 105]  # no budget: on and on
    assert not eval_due(5, 0, 40, 0) and eval_due(0, None, 40, 200)


def test_final_validation_is_sized_to_the_run():
    # 8 conditions x 50-step episodes: a 200-step run gets one episode per condition (a quick look, no verdict) ...
    assert validation_episodes(0, 200, 8, 50, 20) == 1
    assert validation_episodes(0, 1500, 8, 50, 20) == 3
    # ... a long one the fewest a verdict may rest on, and an explicit count wins.
    assert validation_episodes(0, 100_000, 8, 50, 20) == 20
    assert validation_episodes(50, 200, 8, 50, 20) == 50


# ----- the worker thread -------------------------------------------------------------------------------------------

class FakeEnv:
    def __init__(self):
        self.made_in = threading.current_thread().name
        self.closed_in = None

    def close(self):
        self.closed_in = threading.current_thread().name


def _collect(worker, count, timeout=30.0):
    done, deadline = [], time.monotonic() + timeout
    while len(done) < count and time.monotonic() < deadline:
        done += worker.collect()
        time.sleep(0.01)
    return done


def test_the_worker_runs_jobs_in_order_in_its_thread_and_owns_its_env():
    envs = []
    worker = EvalWorker(lambda: envs.append(FakeEnv()) or envs[-1], name="eval-test")
    assert worker.busy is False
    worker.submit("a", lambda w: (w.env(), threading.current_thread().name))
    worker.submit("b", lambda w: 1 / 0)
    worker.submit("c", lambda w: w.env())
    assert worker.busy
    done = _collect(worker, 3)
    assert [job.name for job in done] == ["a", "b", "c"] and not worker.busy
    assert done[0].result[1] == "eval-test" and done[2].result is done[0].result[0]  # one env, made once, in there
    assert isinstance(done[1].error, ZeroDivisionError) and done[1].result is None
    assert worker.close(timeout=5)
    assert len(envs) == 1 and envs[0].made_in == envs[0].closed_in == "eval-test"


def test_closing_the_worker_stops_the_job_under_way():
    worker = EvalWorker(FakeEnv)
    started = threading.Event()

    def long_job(w):
        started.set()
        while not w.should_stop():
            time.sleep(0.01)
        return "stopped"

    worker.submit("long", long_job)
    worker.submit("never", lambda w: "ran")
    assert started.wait(10)
    # the job never ends by itself: its thread ends (before close's generous deadline) only because it was asked to
    assert worker.close(timeout=30)
    done = worker.collect()
    assert [(j.name, j.result) for j in done] == [("long", "stopped"), ("never", None)]


def test_an_evaluation_job_is_the_in_process_evaluation():
    """The learner's evaluations run robot_rl.sim.evaluate.evaluate with a deterministic Actor, as `robot-rl train`
    does: the same episodes, the same report row."""
    from ros_harness import untrained_state_agent

    from robot_rl.actor.session import Actor
    from robot_rl.policies.gaussian import GaussianPolicy
    from robot_rl.sim.loop import make_env
    from robot_rl.sim.evaluate import EVAL_SEED_OFFSET, evaluate, evaluation_job

    agent = untrained_state_agent()
    worker = EvalWorker(lambda: make_env("PickCube-v0", obs_mode="state"))
    try:
        worker.submit("eval", evaluation_job(GaussianPolicy(agent), 2, EVAL_SEED_OFFSET))
        (job,) = _collect(worker, 1, timeout=120)
    finally:
        worker.close()
    assert job.error is None, job.error
    env = make_env("PickCube-v0", obs_mode="state")
    try:
        direct = evaluate(env, Actor(GaussianPolicy(agent), deterministic=True), 2, EVAL_SEED_OFFSET)
    finally:
        env.close()
    assert job.result.report_row(40) == direct.report_row(40)
    assert [e.seed for e in job.result] == [EVAL_SEED_OFFSET, EVAL_SEED_OFFSET + 1]


# ----- progress and rates ------------------------------------------------------------------------------------------

def test_progress_line():
    row = {"env_step": 120, "episodes": 5, "successes": 2, "success_rate": 0.4, "mean_return": 0.4,
           "mean_length": 40.0}
    line = progress_line(trained_on=150, received=156, budget=200, updates=300, updates_per_s=24.06,
                         weights_version=31, episodes=4, successes=1, last_eval=row,
                         evaluating="evaluation at env step 150: 2/5 episodes (1 s)")
    assert line == ("progress: 150/200 transitions (75%), 6 more received, 300 updates (24.1/s), weights v31, "
                    "4 episodes (success 25%); last eval 40 % (2/5) at env step 120; evaluation at env step 150: "
                    "2/5 episodes (1 s)")
    assert progress_line(trained_on=0, received=0, budget=0, updates=0, updates_per_s=float("nan"),
                         weights_version=1, episodes=0, successes=0, last_eval=None) == \
        "progress: 0 transitions, 0 updates, weights v1, 0 episodes; last eval none yet"


def test_rates_over_a_sliding_window():
    window = RateWindow(window_s=10.0)
    assert window.add(0.0, steps=0) == {"steps": 0.0}
    assert window.add(1.0, steps=10) == {"steps": 10.0}
    for t in range(2, 31):
        rates = window.add(float(t), steps=10 * t if t < 20 else 200)
    assert rates["steps"] == 0.0  # stopped 10 s ago: the window no longer sees it moving


def test_robot_summary_per_actor():
    log = [{"source": "robot1", "success": True, "length": 10, "intervention_rate": 0.5},
           {"source": "robot2", "success": False, "length": 20, "intervention_rate": 0.0},
           {"source": "robot1", "success": False, "length": 30, "intervention_rate": 0.0}]
    summary = robot_summary(log)
    assert list(summary) == ["robot1", "robot2"]
    assert summary["robot1"] == {"episodes": 2, "successes": 1, "success_rate": 0.5, "steps": 40,
                                 "intervention_rate": 5 / 40, "recent_success_rate": 0.5}
    assert summary["robot2"]["intervention_rate"] == 0.0


# ----- the final weights -------------------------------------------------------------------------------------------

def test_final_weights_say_training_is_done_and_policy_files_stay_as_they_were():
    from robot_rl.core.codec import unpack
    from robot_rl.wire.weights import WeightsMessage, decode_weights, encode_weights
    from robot_rl.core.types import ObservationSpec

    spec = ObservationSpec.from_shapes({"state": ((14,), np.float32)})
    message = WeightsMessage(3, b"p", spec, 4, {}, transitions=200, updates=400)
    assert "training_done" not in unpack(encode_weights(message))
    assert decode_weights(encode_weights(message)).training_done is False
    final = decode_weights(encode_weights(WeightsMessage(4, b"p", spec, 4, {}, training_done=True)))
    assert final.training_done is True and final.version == 4


# ----- robot-rl status ---------------------------------------------------------------------------------------------

def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _learner_status(now, **extra):
    return {"received": 130, "rejected": 0, "duplicates": 3, "steps": 120, "updates": 240, "weights_version": 25,
            "learner_ready": True, "online": 120, "demo": 270, "interventions": 6, "episodes": 3, "successes": 1,
            "acks": {"robot1/aa": 70, "robot2/bb": 59}, "time": now - 0.5, "phase": "training", "budget": 200,
            "trained_on": 120, "rates": {"received_per_s": 10.0, "updates_per_s": 20.0}, "eval_every": 40,
            "evals": 3, "last_eval": {"env_step": 80, "episodes": 5, "successes": 2, "success_rate": 0.4,
                                      "mean_return": 0.4, "mean_length": 41.0},
            "worker": {"job": "evaluation at env step 120", "progress": [2, 5]},
            "robots": robot_summary([{"source": "robot1", "success": True, "length": 50, "intervention_rate": 0.1},
                                     {"source": "robot1", "success": False, "length": 50, "intervention_rate": 0.0},
                                     {"source": "robot2", "success": False, "length": 50, "intervention_rate": 0.0}]),
            **extra}


def _actor_status(source, now, age, **extra):
    return {"source": source, "episodes": 2, "successes": 1, "results": [], "steps": 100, "interventions": 5,
            "transitions": 72, "commands": 73, "held": 4, "holds": {"stale:camera/front": 3, "nan": 1},
            "acked_through": 70, "outbox": 1, "weights_version": 24, "phase": "running", "waiting_for": None,
            "rates": {"transitions_per_s": 9.8, "commands_per_s": 9.9}, "done": False, "learner_done": False,
            "waits_s": {"a lock-step frame": 1.5}, "time": now - age, **extra}


def test_status_reads_a_run_folder_with_a_learner_and_two_robots(tmp_path):
    now = time.time()
    _write(tmp_path / "config.json", {"task": "PickCube-v0", "obs_mode": "state"})
    _write(tmp_path / "learner" / "learner_status.json", _learner_status(now))
    _write(tmp_path / "robot1.json", _actor_status("robot1/aa", now, 0.3))
    _write(tmp_path / "robot2.json", _actor_status("robot2/bb", now, STALE_AFTER_S + 20))
    _write(tmp_path / "result.json", {"received": 1})  # neither kind: ignored
    _write(tmp_path / "checkpoint" / "learner.json", _learner_status(now))  # not a status file's folder
    status = read_run_status(tmp_path, now=now)
    assert [(n["node"], n["name"], n["file"], n["stale"]) for n in status["nodes"]] == [
        ("learner", "learner", "learner/learner_status.json", False), ("actor", "robot1", "robot1.json", False),
        ("actor", "robot2", "robot2.json", True)]
    assert status["nodes"][0]["state"] == "training; evaluation at env step 120 2/5"
    assert status["learner"]["trained_on"] == 120 and status["learner"]["weights_version"] == 25
    robot1, robot2 = status["robots"]
    assert robot1["robot"] == "robot1" and robot1["counted_by"] == "learner"  # the learner's count wins
    assert (robot1["episodes"], robot1["success_rate"], robot1["intervention_rate"]) == (2, 0.5, 0.05)
    assert (robot1["transitions"], robot1["acked_through"], robot1["weights_version"]) == (72, 70, 24)
    text = format_status(status)
    lines = text.splitlines()
    assert lines[0] == f"run {tmp_path} (PickCube-v0, state)"
    assert lines[1] == ("learner: training; trained on 120/200 (60%) transitions, received 130, updates 240, "
                        "weights v25; last eval 40 % (2/5) at env step 80")
    actor1 = next(line for line in lines if line.startswith("actor robot1"))
    assert "0.3 s" in actor1 and "9.8 steps/s" in actor1 and "4 (stale:camera/front 3, nan 1)" in actor1
    assert "STALE" in next(line for line in lines if line.startswith("actor robot2"))
    assert "STALE" not in actor1
    robot_line = next(line for line in lines if line.startswith("robot1 "))
    assert robot_line.split() == ["robot1", "2", "50", "%", "50", "%", "5", "%", "72", "70", "v24"]


def test_status_of_a_finished_run_and_an_actor_without_a_learner(tmp_path):
    now = time.time()
    _write(tmp_path / "learner_status.json", _learner_status(now - 600, phase="done", worker=None))
    _write(tmp_path / "actor_status.json", _actor_status("sim0/cc", now, 590, learner_done=True))
    status = read_run_status(tmp_path, now=now)
    assert [n["stale"] for n in status["nodes"]] == [False, False]  # finished nodes stop writing: not stale
    only_actor = tmp_path / "eval-run"
    _write(only_actor / "actor_status.json", _actor_status("robot0/dd", now, 1.0))
    status = read_run_status(only_actor, now=now)
    assert status["learner"] is None and status["robots"][0]["counted_by"] == "actor"
    assert (status["robots"][0]["success_rate"], status["robots"][0]["intervention_rate"]) == (0.5, 0.05)
    assert "learner:" not in format_status(status)


def test_status_command(tmp_path, capsys):
    from robot_rl.apps.cli import main

    now = time.time()
    _write(tmp_path / "learner_status.json", _learner_status(now))
    _write(tmp_path / "actor_status.json", _actor_status("sim0/cc", now, 0.5))
    main(["status", str(tmp_path), "--json"])
    status = json.loads(capsys.readouterr().out)
    assert [n["node"] for n in status["nodes"]] == ["learner", "actor"]
    assert [r["robot"] for r in status["robots"]] == ["robot1", "robot2", "sim0"]  # the learner's, and this actor
    main(["status", str(tmp_path)])
    out = capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert out.startswith(f"run {tmp_path}\nlearner: training;") and "actor sim0" in out
    for args, message in ((["status", str(tmp_path / "nope")], "no such run folder"),
                          (["status", str(tmp_path / "nope"), "--watch", "0"], "watch=0.0 must be > 0"),
                          (["status", str(tmp_path / "empty")], "holds no learner or actor status file")):
        with pytest.raises(SystemExit) as exit_info:
            main(args)
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and err.startswith("error: ") and message in err, err
        assert len(err.splitlines()) == 1, err


def test_watch_refreshes_until_interrupted(tmp_path):
    now = time.time()
    _write(tmp_path / "actor_status.json", _actor_status("sim0/cc", now, 0.5))
    printed, naps = [], []

    def sleep(seconds):
        naps.append(seconds)
        if len(naps) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        watch(tmp_path, 2.0, True, write=printed.append, sleep=sleep, clear=True)
    assert naps == [2.0] * 3 and len(printed) == 3
    assert all(p.startswith("\x1b[H\x1b[2J{") for p in printed)
