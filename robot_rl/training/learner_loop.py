"""The ROS learner node's training loop, with no ROS in it (robot_rl.ros.nodes.learner_node is its shell).

:class:`LearnerLoop` holds a run's `LearnerServer` and everything the node does with it between its callbacks: build
the learner (off the node loop, in the node's builder thread), attach it, then one learner step per received
transition with weight broadcasts, checkpoints and training metrics; evaluations in a worker thread every
``eval_every`` transitions (sim tasks); at the budget a checkpoint, the final weights, the final evaluation and
validation, ``result.json`` and the report. A new run that ends before it got going leaves nothing behind
(:meth:`LearnerLoop.remove_unstarted_run`). The shell hands it what needs ROS: the logger, weight broadcasts and the
status file. Cheap to import (no JAX): the node's parameter checks use :func:`not_in_sim`.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from robot_rl.training.run_folder import CONFIG_FILE, VIDEO_FILE

RECENT_CHECKPOINTS = 200
"""Checkpoints of this start the loop keeps figures of (received transitions, seconds, bytes)."""


def not_in_sim(robot, task: str) -> str:
    """Why a run does not run its task in the sim mirror (a phrase): a real robot's file, or not a sim task."""
    if not robot.sim:
        return f"robot file {robot.path or robot.name} is a real robot's (sim: false)"
    return f"task {task!r} is not a sim task"


class LearnerLoop:
    """The learner node's run: build, train, evaluate and finish (see the module doc); the node calls `work()`
    between its callbacks."""

    def __init__(self, settings: Mapping[str, Any], cfg, robot, *, startup: dict[str, float | int], log,
                 publish_weights: Callable[..., bool], write_status: Callable[[], None]):
        """`settings`: the node's parameters (checked); `cfg`: a new run's TrainConfig (None when resuming: built
        from `settings` once JAX is in); `robot`: its RobotConfig; `startup`: the wall-clock time each start-up
        stage ended (`interpreter_imports` the first; `mark` adds the others); `log`: an rclpy-style logger (info,
        warning and error, with keyword options); `publish_weights(training_done=False)`: broadcast the server's
        current weights, returning whether they went; `write_status()`: write the node's status file now. Make it
        before the run folder is made: a new run that never gets going removes what this start added."""
        from robot_rl.core.interrupts import first_missing
        from robot_rl.learner.evaluations import RateWindow, resolve_eval_every

        self.settings = settings
        self.run_dir = Path(settings["run_dir"])
        self.cfg = cfg
        self.robot = robot
        self.startup = startup
        self.log = log
        self.publish_weights = publish_weights
        self.write_status = write_status
        self.new_run = cfg is not None and not (self.run_dir / CONFIG_FILE).exists()
        self._made_dir = first_missing(self.run_dir)
        self._entries_before = set(os.listdir(self.run_dir)) if self._made_dir is None else set()
        self.stopping = False  # a stop request came: the builder's demo recording and fetches stop at their next step
        self._removed = False
        self.budget = int(settings["steps"])
        self.checkpoint_every = int(settings["checkpoint_every"])
        self.final_eval_episodes = int(settings["final_eval_episodes"])
        self.eval_episodes = int(settings["eval_episodes"])
        self.eval_every = resolve_eval_every(int(settings["eval_every"]), self.budget) if self.eval_episodes else 0
        self.progress_every_s = float(settings["progress_every_s"])
        self.server = None  # the LearnerServer, once `open_server` made it
        # (received transitions, seconds, bytes) of this start's checkpoints: a session's figures (bench/session.py)
        self.checkpoints: collections.deque[tuple[int, float, int]] = collections.deque(maxlen=RECENT_CHECKPOINTS)
        self.last_info: dict[str, float] = {}
        self.started = time.monotonic()
        self.next_checkpoint = 0
        self.done = False
        self.exit_status = 0
        self.built = None  # (learner, message) once the builder is done
        self.build_error: BaseException | None = None
        self.sim_episode_steps = 0  # the task's episode length if it is a sim task (set by the builder)
        self.worker = None  # robot_rl.learner.evaluations.EvalWorker: evaluations and the final validation (sim tasks)
        self._jobs: dict[str, Callable] = {}  # name of a submitted worker job -> what to do with its result
        self.last_eval_step: int | None = None
        self.finishing: str | None = None  # the end-of-budget stage under way (final evaluation, validation)
        self.result: dict | None = None  # result.json, once the budget is reached
        self._video: Path | None = None
        self._rate_window = RateWindow()
        self.rates = {"received_per_s": 0.0, "updates_per_s": 0.0}
        self._metrics_episodes = 0
        self._update_rate = None

    def open_server(self) -> str:
        """Make the run's LearnerServer and open its run folder (checkpoint state, transition log); returns what it
        found. ValueError or OSError for a corrupt checkpoint state or transition log entry."""
        from robot_rl.learner.server import LearnerServer

        settings = self.settings
        self.server = LearnerServer(None, self.run_dir,
                                    updates_per_transition=float(settings["updates_per_transition"]),
                                    weights_every=int(settings["weights_every"]), budget=self.budget,
                                    abandon_after_s=float(settings["abandon_after_s"]))
        message = self.server.open()
        self.last_eval_step = self.server.evals[-1]["env_step"] if self.server.evals else None
        return message

    def is_stopping(self) -> bool:
        return self.stopping

    # ----- start-up ----------------------------------------------------------------------------------------------
    def build_learner(self, cfg, plan, *, check_demos: Callable[[], None]) -> None:
        """Build the learner of `plan` (robot_rl.policies.registry), record or load the demos of a new run
        (`check_demos()` once they are loaded), write its config.json, restore the checkpoint and compile the
        gradient step. Off the node loop (the node's builder thread); `attach` takes it from there."""
        from robot_rl.core.config_io import config_to_json
        from robot_rl.learner.learner import Learner
        from robot_rl.learner.server import compile_learner_step
        from robot_rl.training.demos import record_demos

        learner = Learner(plan.observation_spec, plan.action_dim, plan.sac, cfg.learner,
                          chunk_decisions=plan.chunk_decisions, robot_action_dim=plan.robot_action_dim)
        self.server.make_policy = plan.make_policy
        self.mark("learner")
        resuming = self.server.checkpoint_state is not None
        demos = None if resuming or not cfg.learns_from_demos else record_demos(cfg, self.run_dir,
                                                                                 should_stop=self.is_stopping)
        labeller = plan.demo_labeller(learner.agent)
        message = self.server.load_learner(learner, demos, labeller)
        if cfg.demo_path is not None and not resuming:  # read by the loader above: a usable dataset
            check_demos()
        # The settings this run starts with, once its demos are in (a failed or stopped start leaves none).
        if not resuming and not self.stopping:
            (self.run_dir / CONFIG_FILE).write_text(json.dumps(config_to_json(cfg), indent=2))
        self.mark("restore")
        compile_learner_step(learner)
        self.mark("compile")
        self.cfg = cfg
        self.built = (learner, message)

    def attach(self) -> BaseException | None:
        """The builder is done: stage the logged transitions, broadcast weights, start training (node loop).
        Returns why the start-up failed (the builder's error, or the transition log changed under us), or None."""
        from robot_rl.training.pacing import UpdateRate

        learner, message = self.built or (None, "")
        if self.build_error is None:
            self.log.info(message)
            try:
                self.log.info(self.server.attach(learner))
            except (ValueError, OSError) as error:  # the transition log changed under us
                self.build_error = error
        if self.build_error is not None:
            return self.build_error
        self.log_rejections()
        self.mark("replay")
        self.next_checkpoint = self.server.received + self.checkpoint_every
        self._metrics_episodes = self.server.episodes
        self._update_rate = UpdateRate(learner.updates, time.monotonic())
        self.publish_weights()
        started_at = self.startup["interpreter_imports"]
        stages = ", ".join(f"{k} {v - started_at:.2f}s" for k, v in self.startup.items() if k != "pid")
        evals = (f"; evaluating every {self.eval_every} transitions ({self.eval_episodes} episodes, in a worker "
                 "thread)" if self.eval_every else "")
        self.log.info(f"learner ready: utd={self.cfg.learner.utd} critics={self.cfg.sac.critic_ensemble_size}"
                      f"{evals} (start-up: {stages})")
        if self.sim_episode_steps and (self.eval_every or self.final_eval_episodes):
            from robot_rl.learner.evaluations import EvalWorker
            from robot_rl.sim.loop import make_env

            cfg = self.cfg
            self.worker = EvalWorker(lambda: make_env(cfg.task, **cfg.env_settings()))
        self.maybe_evaluate()
        return None

    def mark(self, stage: str) -> None:
        self.startup[stage] = time.time()

    # ----- training ----------------------------------------------------------------------------------------------
    def work(self) -> bool:
        """One learner step if one is owed (with its weights, checkpoint and evaluation when due), or the end of the
        budget; returns whether it did some work. Call it once the learner is attached."""
        server = self.server
        self.collect_jobs()
        if self.finishing is not None or self.done:
            return False  # the worker evaluates / validates; the node keeps acknowledging
        if server.budget_done:
            self.finish()
            return True
        if server.pending_steps <= 0:
            if server.warmup_weights_due and self.publish_weights():
                return True
            self.maybe_evaluate()
            return False
        self.last_info, weights_due = server.train_step()
        if weights_due:
            self.publish_weights()
        self.record_metrics()
        if server.received >= self.next_checkpoint:
            self.checkpoint()
        self.maybe_evaluate()
        return True

    def record_metrics(self) -> None:
        """A training-metrics row for the report once per inserted episode, as the in-process loop keeps them."""
        server = self.server
        if server.episodes == self._metrics_episodes or not self.last_info:
            return
        rate = self._update_rate.read(server.learner.updates, time.monotonic())
        server.metrics.append({"env_step": server.trained_on, "updates": server.learner.updates,
                               "updates_per_s": rate, **self.last_info})
        self._metrics_episodes = server.episodes

    def checkpoint(self) -> None:
        from robot_rl.learner.server import checkpoint_dir

        start = time.perf_counter()
        self.server.checkpoint()
        seconds = time.perf_counter() - start
        self._update_rate.exclude(seconds)  # the learner's speed, not the checkpoint's
        self.next_checkpoint = self.server.received + self.checkpoint_every
        written = checkpoint_dir(self.run_dir)
        size = sum(f.stat().st_size for f in written.rglob("*") if f.is_file()) if written else 0
        self.checkpoints.append((self.server.received, round(seconds, 4), size))
        self.log.info(f"checkpoint at {self.server.received} transitions, {self.server.learner.updates} updates "
                      f"({seconds:.2f}s, {size / 1e6:.1f} MB)")

    def log_rejections(self) -> None:
        for reason in self.server.rejections:
            self.log.warning(f"dropped {reason}", throttle_duration_sec=1.0)
        self.server.rejections.clear()

    # ----- evaluations (robot_rl.learner.evaluations: a worker thread) -------------------------------------------
    def _submit(self, name: str, job, on_done) -> None:
        self._jobs[name] = on_done
        self.worker.submit(name, job)

    def _evaluation(self, episodes: int, video: bool = False):
        """A worker job evaluating the current policy (a snapshot: the agent is immutable) as `robot-rl train` does."""
        from robot_rl.sim.evaluate import EVAL_SEED_OFFSET, evaluation_job

        policy = self.server.make_policy(self.server.learner.agent)
        return evaluation_job(policy, episodes, self.cfg.seed + EVAL_SEED_OFFSET,
                              video_path=self.run_dir / VIDEO_FILE if video else None)

    def maybe_evaluate(self) -> None:
        """Start the evaluation that is due (eval_every), unless the worker is still on the previous one."""
        from robot_rl.learner.evaluations import eval_due

        server = self.server
        if self.worker is None or self.worker.busy or self.finishing is not None:
            return
        step = server.trained_on
        if not eval_due(step, self.last_eval_step, self.eval_every, self.budget):
            return
        self.last_eval_step = step
        self._submit(f"evaluation at env step {step}", self._evaluation(self.eval_episodes),
                     lambda job: self._evaluated(job, step))

    def collect_jobs(self) -> None:
        if self.worker is None:
            return
        for job in self.worker.collect():
            self._jobs.pop(job.name)(job)

    def _job_failed(self, job) -> bool:
        """Log a job that raised (a stop request is not a failure); returns whether it did not finish."""
        from robot_rl.sim.evaluate import StopRequested

        if job.error is None and job.result is not None:
            return False
        if job.error is not None and not isinstance(job.error, StopRequested):
            self.log.error(f"{job.name} failed: {type(job.error).__name__}: {job.error}")
            self.exit_status = 1
        return True

    def _evaluated(self, job, step: int) -> None:
        from robot_rl.learner.evaluations import eval_line

        if self._job_failed(job):
            return
        row = job.result.report_row(step)
        self.server.evals.append(row)
        self.log.info(eval_line(row, job.seconds))

    # ----- end of the budget -------------------------------------------------------------------------------------
    def write_report(self, video: Path | None = None, status: str | None = None) -> Path:
        """report.md, learning_curve.png and training_curves.png, as `robot-rl train` writes them; env steps are the
        transitions trained on, as the eval rows and `trained_on` count them."""
        from robot_rl.core.config_io import config_to_json
        from robot_rl.core.report import learner_counters, write_report

        server = self.server
        counters = {**learner_counters(server.learner), "transitions": server.trained_on}
        return write_report(
            self.run_dir, title=f"{self.cfg.task or self.robot.name}, obs {self.cfg.obs_mode}, over ROS 2",
            config=config_to_json(self.cfg),
            evals=list(server.evals), episodes=server.episode_log, metrics=server.metrics, counters=counters,
            wall_seconds=time.time() - server.run_started_at, video=video, status=status)

    def finish(self) -> None:
        """Budget reached: checkpoint, final weights (marked training_done), then the final evaluation and validation
        in the worker while the node keeps serving; `_complete` writes the result and the report."""
        server = self.server
        self.checkpoint()
        self.publish_weights(training_done=True)
        self.log_progress()  # the last training progress line: 100 %
        self.result = {"received": server.received, "trained_on": server.trained_on, "updates": server.learner.updates}
        beyond = server.received - server.trained_on
        self.log.info(f"training budget reached: trained on {server.trained_on} transitions"
                      + (f" ({beyond} more received, logged but not trained on)" if beyond > 0 else "")
                      + f", {server.learner.updates} updates")
        if self.final_eval_episodes and self.worker is not None:
            self.finishing = "final evaluation"
            self.log.info(f"final evaluation: {self.final_eval_episodes} episodes in the sim")
            self._submit("final evaluation", self._evaluation(self.final_eval_episodes, video=True),
                         self._final_evaluated)
            return
        if self.final_eval_episodes:
            self.log.warning(f"no final evaluation: {not_in_sim(self.robot, self.cfg.task)}")
        self._complete()

    def _final_evaluated(self, job) -> None:
        from robot_rl.learner.evaluations import eval_line

        if self._job_failed(job):
            self._complete()
            return
        evaluation = job.result
        row = evaluation.report_row(self.server.trained_on)
        # a run finished before and launched again with the same budget evaluates again: one row per env step
        self.server.evals[:] = [r for r in self.server.evals if r["env_step"] != row["env_step"]] + [row]
        self._video = evaluation.video
        self.result.update(final_eval_success=evaluation.success_rate, final_eval_episodes=len(evaluation),
                           final_eval_ci95=list(evaluation.success_interval))
        self.log.info(f"final evaluation: {eval_line(row, job.seconds)}")
        suite = str(self.settings["validate_suite"])
        if suite and self.robot.sim and bool(self.settings["final_validation"]):
            self._start_validation(suite)
            return
        self._complete()

    def _start_validation(self, suite_name: str) -> None:
        """Validate the final policy in the sim (the run's robot file, in the worker) and write its record next to
        the policy file: what a real robot's actor checks before running it. Sized to the run unless
        validation_episodes says."""
        from robot_rl.learner.evaluations import validation_episodes
        from robot_rl.learner.server import POLICY_FILE
        from robot_rl.sim.evaluate import StopRequested
        from robot_rl.sim.validation import ValidateConfig, load_suite, validate

        suite = load_suite(suite_name)
        requested = int(self.settings["validation_episodes"])
        episodes = validation_episodes(requested, self.budget, len(suite.conditions), self.sim_episode_steps,
                                       suite.min_episodes)
        policy = self.run_dir / POLICY_FILE
        note = ""
        if episodes < suite.min_episodes:
            sized = "" if requested else f"sized to the run's {self.budget} transitions; "
            note = (f" ({sized}a verdict needs {suite.min_episodes} per condition: `robot-rl validate {policy} "
                    f"--robot {self.settings['robot']}` gives one)")
        self.log.info(f"final validation: {suite.name} suite, {len(suite.conditions)} conditions x {episodes} "
                      f"episodes{note}; skip it with final_validation:=false")
        config = ValidateConfig(policy, robot=str(self.settings["robot"]), task=self.cfg.task, suite=suite_name,
                                episodes=episodes, workers=1, out=self.run_dir / "validation", video=False)

        def job(worker):
            def on_block(done: int, total: int) -> None:
                worker.progress = (done, total)
                if worker.should_stop():
                    raise StopRequested

            return validate(config, on_block=on_block)

        self.finishing = "final validation"
        self._submit("final validation", job, lambda finished: self._validated(finished, suite.name, episodes))

    def _validated(self, job, suite: str, episodes: int) -> None:
        if not self._job_failed(job):
            summary = job.result
            self.log.info(f"validation ({suite} suite, {episodes} episodes per condition, {job.seconds:.1f} s): "
                          f"{summary['verdict'].upper()}"
                          + (f" ({'; '.join(summary['verdict_reasons'])})" if summary["verdict_reasons"] else "")
                          + f"; record {summary['record']}")
            self.result["validation"] = {
                "suite": suite, "verdict": summary["verdict"], "record": summary["record"],
                "episodes_per_condition": episodes,
                "success": {c["condition"]: c["success_rate"] for c in summary["conditions"]}}
        self._complete()

    def _complete(self, status: str | None = None) -> None:
        """result.json and the report; the node then exits."""
        self.finishing = None
        (self.run_dir / "result.json").write_text(json.dumps(self.result))
        report = self.write_report(self._video, status)
        self.log.info(f"done: {json.dumps(self.result)}; report: {report}")
        self.write_status()
        self.done = True

    # ----- what the node reports ---------------------------------------------------------------------------------
    @property
    def phase(self) -> str:
        """starting (the agent is being built) | warm-up | training | final evaluation | final validation | done."""
        if self.done:
            return "done"
        if self.finishing is not None:
            return self.finishing
        if not self.server.attached:
            return "starting"
        return "warm-up" if self.server.learner.warming_up else "training"

    def measure_rates(self) -> dict[str, float]:
        """Transitions received and learner updates per second, over the recent window (the status file's)."""
        server = self.server
        updates = server.learner.updates if server.attached else 0
        self.rates = self._rate_window.add(time.monotonic(), received_per_s=server.received, updates_per_s=updates)
        return self.rates

    def log_progress(self) -> None:
        from robot_rl.learner.evaluations import progress_line

        server, worker = self.server, self.worker
        if not server.attached or self.done:
            return
        job = None
        if worker is not None and worker.current is not None:
            done, total = worker.progress or (0, 0)
            job = f"{worker.current}: {done}/{total} episodes ({time.monotonic() - worker.started_at:.0f} s)"
        if self.finishing is not None:
            self.log.info(job or self.finishing)
            return
        self.log.info(progress_line(
            trained_on=server.trained_on, received=server.received, budget=self.budget,
            updates=server.learner.updates, updates_per_s=self.rates["updates_per_s"],
            weights_version=server.weights_version, episodes=server.episodes, successes=server.successes,
            last_eval=server.evals[-1] if server.evals else None, evaluating=job))

    # ----- stopping ----------------------------------------------------------------------------------------------
    def stop(self, signal_number: int | None) -> bool:
        """A stop request: checkpoint and report a run under way; returns whether it was done already (the node
        then lets its last weights and acks go out)."""
        self.stopping = True
        if not self.server.attached:  # the node does not wait for the builder
            if not self.done:
                self.log.info(f"stopping (signal {signal_number}) before the learner was ready: nothing to "
                              "checkpoint (the transition log holds every acknowledged transition)")
            return False
        if self.worker is not None:  # an evaluation or the validation under way stops at its next step
            self.worker.close()
        if self.finishing is not None:  # training is done and checkpointed
            stage = self.finishing
            self.log.info(f"stopping (signal {signal_number}) during the {stage}: training was done and "
                          "checkpointed")
            self.result["stopped_during"] = stage
            self._complete(status=f"Stopped by signal {signal_number} during the {stage}, after training on "
                                  f"{self.server.trained_on} transitions (the policy file is the final one).")
            return False
        if not self.done:
            self.log.info(f"stopping (signal {signal_number}): checkpointing")
            self.checkpoint()
            report = self.write_report(status=f"Stopped by signal {signal_number} after {self.server.trained_on} "
                                              "transitions; launch it again with the same run_dir to resume.")
            self.log.info(f"report so far: {report}; launch again with run_dir {self.run_dir} to resume")
            return False
        return True

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()

    def remove_unstarted_run(self) -> None:
        """A new run that ends before it got going (stopped, or its start-up failed, before its config was written
        and with no transition logged) leaves nothing behind: neither the run_dir this start made nor what it added
        to an existing folder (status file, empty transition log, compilation cache). Launched again, it starts
        afresh; a run with its config or a logged transition is kept, and resumes."""
        import shutil

        self.stopping = True
        if not self._removed:  # decided once; the node may do it again, after the builder wrote there meanwhile
            server = self.server  # none yet: a start-up ended early by a stop signal
            if (not self.new_run or (self.run_dir / CONFIG_FILE).exists()
                    or (server is not None and (server.received or server.log.indices()))):
                return  # an acknowledged transition is in the log, not yet staged
            self._removed = True
            if "jax" in sys.modules:  # a compile the builder finishes now writes no cache entry into the folder
                import jax

                jax.config.update("jax_persistent_cache_min_compile_time_secs", float("inf"))
            self.log.info(f"the run never got going (no config, no transition): removing what it made in "
                          f"{self.run_dir}")
        if self._made_dir is not None:
            shutil.rmtree(self._made_dir, ignore_errors=True)
        elif self.run_dir.is_dir():
            for name in set(os.listdir(self.run_dir)) - self._entries_before:
                path = self.run_dir / name
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
