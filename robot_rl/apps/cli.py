"""The `robot-rl` command: one entry point, a subcommand per job, typed dataclass configs."""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import contextlib
import dataclasses
import errno
import json
import signal
import sys
from pathlib import Path
from typing import Annotated, Literal

import tyro

from robot_rl.core import interrupts
from robot_rl.apps.distill import DistillConfig
from robot_rl.agents.reward_classifier import RewardClassifierConfig
from robot_rl.sim.evaluate import EVAL_SEED_OFFSET
from robot_rl.apps.train import TrainConfig
from robot_rl.apps.train_bc import TrainBCConfig
from robot_rl.apps.replay_in_sim import ReplayInSimConfig
from robot_rl.ros.net.secure import DEFAULT_CA_DAYS, DEFAULT_DAYS as DEFAULT_CERT_DAYS, DEFAULT_PORT as SECURE_PORT
from robot_rl.apps.validate import ValidateConfig

ObsMode = Literal["state", "pixels", "state+pixels"]


@dataclasses.dataclass(frozen=True)
class Record:
    """Record episodes to a zarr dataset: the scripted expert in the sim mirror, or teleoperation on a running graph."""

    out: Path
    """Dataset directory (created, or appended to if it exists)."""
    task: str = "PickCube-v0"
    """Task name, e.g. PickCube-v0 or PegInsert-v0 (with --source ros: a sim task's episode length applies)."""
    source: Literal["sim", "ros"] = "sim"
    """`sim`: run the scripted expert in-process. `ros`: join a running ROS 2 graph (robot drivers or the sim node,
    and a teleop node) and record what the human does; ends after --episodes or on Ctrl-C."""
    namespace: str = "/"
    """With --source ros: the robot's namespace, e.g. /robot1."""
    mode: Literal["realtime", "lockstep"] = "realtime"
    """With --source ros: realtime (a robot, or the sim node in real time) or lockstep (the sim node in lock-step)."""
    robot: str = "sim_panda"
    """With --source ros: robot file (robots/x.yaml) or a shipped robot's name: topics, QoS, limits, commands."""
    policy: Literal["scripted"] = "scripted"
    """Who acts with --source sim: `scripted` is the privileged scripted expert."""
    episodes: int = 10
    """Number of episodes to keep."""
    obs_mode: ObsMode = "state+pixels"
    """Which observations to store."""
    image_size: int = TrainConfig.image_size
    """Camera image height and width in pixels (the same default as `train`, so demos fit a default run); a ROS
    recording crops and resizes every camera frame to it as the robot file says."""
    wrench: bool = False
    """With --source sim: store the wrist force/torque reading too (obs key `wrench`, as `train --wrench` sees it)."""
    noise: float = 0.0
    """Std of Gaussian noise added to the expert's actions."""
    seed: int | None = None
    """Seed of the first episode; attempt k uses seed + k (each episode's seed is stored). Default: 0 for a new
    dataset, one past the largest stored seed when appending; a seed that would repeat stored episodes is refused."""
    only_successes: bool = False
    """Keep only successful episodes (tries up to 3x --episodes)."""
    randomize: str | None = None
    """With --source sim: record each episode under one condition of this validation suite (a shipped suite's name
    such as `default`, or a YAML file), drawn with its values from the episode's seed, as `train --randomize` does:
    demos a `train-bc` policy learns the suite's conditions from. The dataset's attributes name the suite."""

    def __post_init__(self) -> None:
        problems = [f"{name}={getattr(self, name)!r} must be >= {low}"
                    for name, low in (("episodes", 1), ("noise", 0.0), ("seed", 0))
                    if getattr(self, name) is not None and not getattr(self, name) >= low]
        if not 16 <= self.image_size <= 640:
            problems.append(f"image_size={self.image_size!r} must be in [16, 640]")
        if self.wrench and self.source == "ros":
            problems.append("--wrench is for --source sim (a robot file names no force/torque topic yet)")
        if self.randomize and self.source == "ros":
            problems.append("--randomize is for --source sim (a robot's world is as it is)")
        if problems:
            raise ValueError(f"invalid record options: {'; '.join(problems)}")


@dataclasses.dataclass(frozen=True)
class Info:
    """Summarise a dataset: episodes, steps, success rate, keys and sizes."""

    path: tyro.conf.Positional[Path]
    """Dataset directory."""
    json: bool = False
    """Print the summary as JSON."""
    verify: bool = False
    """Read every chunk and check every episode against the checksums written when it was recorded; lists every
    damaged episode and exits non-zero if there is one. (Without it, missing chunk files are still found.)"""


@dataclasses.dataclass(frozen=True)
class Replay:
    """Render an episode's stored camera frames to a video file."""

    path: tyro.conf.Positional[Path]
    """Dataset directory."""
    out: Path = Path("replay.mp4")
    """Output video (.mp4)."""
    episode: int = 0
    """Episode index (negative counts from the end)."""
    cameras: tuple[str, ...] = ()
    """Cameras to tile side by side (none given: every stored camera)."""


@dataclasses.dataclass(frozen=True)
class Export:
    """Write a dataset in another tool's format: `lerobot` is LeRobot's v3.0 layout (parquet, H.264 videos, meta/)."""

    path: tyro.conf.Positional[Path]
    """Dataset directory."""
    out: Path
    """Output directory (created; it must not exist or be empty)."""
    format: Literal["lerobot"] = "lerobot"
    """Output format."""
    crf: int = 18
    """H.264 quality of the camera videos: 0 is lossless, 18 visually lossless, 51 the worst."""

    def __post_init__(self) -> None:
        if not 0 <= self.crf <= 51:
            raise ValueError(f"invalid export options: crf={self.crf!r} must be in [0, 51]")


@dataclasses.dataclass(frozen=True)
class Import:
    """Read a LeRobot v3.0 dataset (a folder with meta/info.json) into a new robot_rl dataset."""

    path: tyro.conf.Positional[Path]
    """LeRobot dataset directory."""
    out: Path
    """Dataset directory to create (it must not exist or be empty)."""
    task: str | None = None
    """Task name to store (default: the LeRobot dataset's task; required when it has several)."""


@dataclasses.dataclass(frozen=True)
class Train:
    """Train SAC in the sim mirror from demos, online data and (optionally) simulated human interventions."""

    config: Annotated[TrainConfig, tyro.conf.arg(name="")] = TrainConfig()
    resume: Path | None = None
    """Continue the run in this folder from its last checkpoint with its saved config; a larger --steps extends
    a finished run. Only --steps, --eval-every, --eval-episodes, --final-eval-episodes, --checkpoint-every and
    the --video switch may change."""


@dataclasses.dataclass(frozen=True)
class Eval:
    """Evaluate a saved policy in the sim mirror (deterministic actions): prints one JSON line with the success rate
    and its 95 % interval, and writes eval.json (and eval.mp4 with --video) to --out."""

    policy: Path
    """Policy of any kind: a SAC policy.msgpack (from train or the learner node), a policy folder (from train-bc
    or distill), or the run folder holding either."""
    task: str | None = None
    """Task to evaluate on (None: the task in the run's config.json next to the policy file)."""
    episodes: int = 20
    """Evaluation episodes."""
    video: bool = False
    """Film the first --video-episodes episodes (front and wrist cameras) to eval.mp4."""
    video_episodes: int = 2
    """Episodes in the video."""
    obs_mode: ObsMode | None = None
    """Observations to give the policy (None: what its observation spec needs)."""
    image_size: int | None = None
    """Camera image size for pixel policies (None: the size in its observation spec)."""
    seed: int = EVAL_SEED_OFFSET
    """Seed of the first episode; episode k uses seed + k. The default is where the held-out evaluation seeds of a
    training run with seed 0 start, so its final evaluation is reproduced."""
    out: Path | None = None
    """Folder for eval.json and eval.mp4 (None: an `eval` folder next to the policy file)."""
    device: str = "auto"
    """Torch device of a torch policy: auto (cuda when there is one), cpu, cuda or cuda:N."""
    inference_steps: int | None = None
    """DDIM steps per chunk of a diffusion policy (None: as saved in its policy.json)."""

    def __post_init__(self) -> None:
        problems = [f"{name}={getattr(self, name)!r} must be >= {low}"
                    for name, low in (("episodes", 1), ("video_episodes", 1), ("seed", 0))
                    if getattr(self, name) < low]
        if self.image_size is not None and not 16 <= self.image_size <= 640:
            problems.append(f"image_size={self.image_size!r} must be in [16, 640]")
        if problems:
            raise ValueError(f"invalid eval options: {'; '.join(problems)}")


@dataclasses.dataclass(frozen=True)
class Launch:
    """Run a ROS 2 YAML launch file with the project's launcher (robot_rl.ros.launch)."""

    file: Annotated[tyro.conf.Positional[Path], tyro.conf.arg(metavar="FILE")]
    """Launch file (ROS 2 YAML launch format)."""
    arguments: Annotated[tyro.conf.Positional[tuple[str, ...]], tyro.conf.arg(metavar="NAME:=VALUE")] = ()
    """Launch arguments as name:=value."""
    domain_id: int | None = None
    """ROS_DOMAIN_ID of every process (None: $ROS_DOMAIN_ID, else 0)."""
    grace_s: float = 10.0
    """Seconds processes get to exit after SIGINT before SIGTERM, then SIGKILL."""
    dry_run: bool = False
    """Print the resolved command lines, one per process, and exit."""


@dataclasses.dataclass(frozen=True)
class Doctor:
    """Check the running robot drivers against a robot file: every camera, arm and gripper stream (seen, type,
    encoding and size, rate, stamp delay, QoS match), the TCP pose against the workspace, the gripper reading, the
    command topics' subscribers and the reset service. Exit 1 with the first thing to fix when a check fails."""

    robot: Annotated[tyro.conf.Positional[str], tyro.conf.arg(metavar="ROBOT")]
    """Robot file (robots/x.yaml) or the name of a shipped one (sim_panda)."""
    duration: float = 3.0
    """Seconds to listen to the streams."""
    wait: float = 0.0
    """First wait up to this many seconds for every stream, command subscriber and the reset service to appear
    (drivers still starting)."""
    json: bool = False
    """Print one JSON object instead of the table."""
    namespace: str = "/"
    """The robot's namespace: relative topic names of the robot file resolve in it."""
    domain_id: int | None = None
    """ROS_DOMAIN_ID to join (None: $ROS_DOMAIN_ID, else 0)."""
    timing: Literal["fail", "warn"] = "fail"
    """fail: a stream's rate, stamp delay or reading age outside the robot file's limits fails the check; warn: they
    are reported as warnings (timing measured on a busy development machine)."""


@dataclasses.dataclass(frozen=True)
class Status:
    """Show what a ROS training graph is doing, from the status files its nodes write every second in its run_dir:
    nodes (status file age, stale ones marked), their rates and holds, the learner's progress (transitions, updates,
    weights version, last evaluation), and per robot the success and intervention rate so far."""

    run_dir: tyro.conf.Positional[Path]
    """The launch's run_dir (e.g. runs/ros-sim-train)."""
    json: bool = False
    """Print one JSON object (one per refresh with --watch)."""
    watch: float | None = None
    """Print it again every this many seconds until Ctrl-C."""

    def __post_init__(self) -> None:
        if self.watch is not None and not self.watch > 0:
            raise ValueError(f"invalid status options: watch={self.watch!r} must be > 0 seconds")


@dataclasses.dataclass(frozen=True)
class TrainReward:
    """Train a success classifier (the reward on a real robot) on camera frames of recorded datasets: the last
    frames of successful episodes and human-labelled frames are success, failed episodes and earlier frames are
    not. Writes the model, config.json and metrics.json (held-out precision / recall / F1) to --out."""

    dataset: tuple[Path, ...]
    """Dataset directories: --dataset A B (or --dataset A --dataset B), as train-bc."""
    out: Path
    """Folder to write the classifier to (created; it must not exist or be empty)."""
    config: Annotated[RewardClassifierConfig, tyro.conf.arg(name="")] = RewardClassifierConfig()


@dataclasses.dataclass(frozen=True)
class Label:
    """Label frames of a dataset success or failure for `train-reward` (stored in the dataset's frame_labels.json):
    in an OpenCV window (keys: s success, f failure, c clear, n next, b back, [ ] episode, q quit), or without one
    with --episode N --frames A:B and --success / --failure / --clear, or with --import labels.json."""

    path: tyro.conf.Positional[Path]
    """Dataset directory."""
    episode: int | None = None
    """Episode of --frames (negative counts from the end); in the window, the episode shown first."""
    frames: str | None = None
    """Frames of --episode, in slice syntax: 40:50 is frames 40..49, -3: the last three; an episode of T steps has
    T + 1 frames, the last one its final observation."""
    success: bool = False
    """Label the --frames success."""
    failure: bool = False
    """Label the --frames failure."""
    clear: bool = False
    """Remove the labels of the --frames."""
    import_: Annotated[Path | None, tyro.conf.arg(name="import")] = None
    """JSON list of {"episode": 3, "frames": "40:50", "label": "success" | "failure" | "none"} entries to apply."""
    cameras: tuple[str, ...] = ()
    """Cameras shown in the window (none given: every stored camera)."""


@dataclasses.dataclass(frozen=True)
class CertsCa:
    """On the machine that will hold the run's certificate authority: make OUT with ca.key (it never leaves OUT),
    ca.pem, dh.pem and run.json (the server's address and port). Next: `robot-rl certs request` on each host."""

    out: Annotated[tyro.conf.Positional[Path], tyro.conf.arg(metavar="OUT")]
    """Folder to make (it must not exist or be empty)."""
    server: str
    """IPv4 address or host name at which the robots reach the learner's host."""
    port: int = SECURE_PORT
    """TCP port the learner's host listens on (the only one the robots need to reach)."""
    days: int = DEFAULT_CA_DAYS
    """Days the CA stays valid (no host certificate outlasts it)."""
    dh: Literal["ffdhe2048", "ffdhe3072", "ffdhe4096", "generate"] = "ffdhe2048"
    """Diffie-Hellman parameters: a standard RFC 7919 group (made at once), or `generate` fresh 2048-bit ones with
    openssl dhparam (slow: measured 7 to 70 s)."""


@dataclasses.dataclass(frozen=True)
class CertsRequest:
    """On the host that will use the certificate: make FOLDER (mode 0700) with this host's private key.pem (made here,
    never copied; reused if present, which is how a certificate is renewed) and request.csr, which goes to the CA's
    machine for `robot-rl certs sign`."""

    folder: Annotated[tyro.conf.Positional[Path], tyro.conf.arg(metavar="FOLDER")]
    """This host's certificate folder (ROBOT_RL_CERTS)."""
    host: str
    """This host's name in the run (letters, digits, '-' and '_')."""


@dataclasses.dataclass(frozen=True)
class CertsSign:
    """On the CA's machine: sign a host's request.csr for one role, and write the host's public files (cert.pem,
    ca.pem, dh.pem, network.json) to copy into that host's FOLDER."""

    ca: Annotated[tyro.conf.Positional[Path], tyro.conf.arg(metavar="CA")]
    """The CA folder made by `robot-rl certs ca`."""
    request: Annotated[tyro.conf.Positional[Path], tyro.conf.arg(metavar="REQUEST.csr")]
    """The host's request.csr."""
    role: Literal["server", "robot"]
    """server: the learner's host (one per run); robot: a robot's computer. The signer decides, not the request."""
    days: int = DEFAULT_CERT_DAYS
    """Days the certificate stays valid; renew with `robot-rl certs request` on the host and `sign` here again."""
    out: Path | None = None
    """Folder for the host's files (default CA/issued/HOST)."""


@dataclasses.dataclass(frozen=True)
class Certs:
    """Certificates for the `secure` network mode (ROBOT_RL_NETWORK=secure), in three steps: `ca` on the CA's
    machine, then `request` on each host (its private key is made there and never copied), then `sign` on the CA's
    machine (one role per certificate). Only requests and certificates travel between machines."""

    step: Annotated[
        Annotated[CertsCa, tyro.conf.subcommand("ca", prefix_name=False)]
        | Annotated[CertsRequest, tyro.conf.subcommand("request", prefix_name=False)]
        | Annotated[CertsSign, tyro.conf.subcommand("sign", prefix_name=False)],
        tyro.conf.arg(name="")]


Command = (
    Annotated[Train, tyro.conf.subcommand("train")]
    | Annotated[Eval, tyro.conf.subcommand("eval")]
    | Annotated[Record, tyro.conf.subcommand("record")]
    | Annotated[Info, tyro.conf.subcommand("info")]
    | Annotated[Replay, tyro.conf.subcommand("replay")]
    | Annotated[Export, tyro.conf.subcommand("export")]
    | Annotated[Import, tyro.conf.subcommand("import")]
    | Annotated[Launch, tyro.conf.subcommand("launch")]
    | Annotated[Doctor, tyro.conf.subcommand("doctor")]
    | Annotated[Status, tyro.conf.subcommand("status")]
    | Annotated[TrainReward, tyro.conf.subcommand("train-reward")]
    | Annotated[Label, tyro.conf.subcommand("label")]
    | Annotated[TrainBCConfig, tyro.conf.subcommand("train-bc")]
    | Annotated[DistillConfig, tyro.conf.subcommand("distill")]
    | Annotated[ValidateConfig, tyro.conf.subcommand("validate")]
    | Annotated[ReplayInSimConfig, tyro.conf.subcommand("replay-in-sim")]
    | Annotated[Certs, tyro.conf.subcommand("certs")]
)


def run_record_ros(cfg: Record) -> None:
    """Run an actor node with no policy in the graph's namespace; it writes each finished episode to the dataset."""
    from robot_rl.ros.nodes.actor_node import main as actor_main

    obs_mode = {"state+pixels": "state+pixels", "pixels": "pixels", "state": "state"}[cfg.obs_mode]
    status = actor_main([
        "robot-rl record", "--ros-args", "-r", f"__ns:={cfg.namespace}", "-r", "__node:=recorder",
        "-p", f"task:={cfg.task}", "-p", f"obs_mode:={obs_mode}", "-p", f"mode:={cfg.mode}", "-p", "policy:=none",
        "-p", f"robot:={cfg.robot}", "-p", f"image_size:={cfg.image_size}",
        "-p", "stream_transitions:=false", "-p", f"record_path:={cfg.out}", "-p", f"episodes:={cfg.episodes}"])
    interrupts.check()  # stopped by SIGINT / SIGTERM: the finished episodes are kept, and the exit status is 130 / 143
    if status:
        raise SystemExit(status)


def run_record(cfg: Record) -> None:
    if cfg.source == "ros":
        run_record_ros(cfg)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.sim.loop import first_seed, make_env, max_attempts_for, record_episodes, writer_for_env
    from robot_rl.sim.expert import make_expert

    env = make_env(cfg.task, obs_mode=cfg.obs_mode, image_size=cfg.image_size, wrench=cfg.wrench)
    results = []
    writer, held_before = None, 0
    try:
        if cfg.randomize:
            from robot_rl.apps.train import randomized_env

            env = randomized_env(env, cfg.randomize)
        writer = writer_for_env(env, cfg.out, cfg.task, attrs={"policy": cfg.policy, "noise": cfg.noise,
                                                              **({"randomize": cfg.randomize} if cfg.randomize else {})})
        held_before = writer.num_episodes
        seed = first_seed(writer, cfg.seed, max_attempts_for(cfg.episodes, cfg.only_successes))
        expert = make_expert(env, noise=cfg.noise, seed=seed)
        with Progress(
            TextColumn("[bold]recording"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
        ) as progress:
            bar = progress.add_task("record", total=cfg.episodes, status="")

            def on_episode(result, keep):
                interrupts.check()  # a stop request eaten on the way (robot_rl.core.interrupts) ends it here
                if keep:
                    results.append(result)
                    successes = sum(r.success for r in results)
                    progress.update(bar, advance=1, status=f"success {successes}/{len(results)}")

            record_episodes(env, expert, writer, cfg.episodes, seed=seed, only_successes=cfg.only_successes,
                            on_episode=on_episode)
    except BaseException as exc:  # stopped: every finished episode is committed; the one under way is dropped
        stopped = isinstance(exc, KeyboardInterrupt) or interrupts.requested() is not None  # or a converted interrupt
        kept = writer.seeds[held_before:] if stopped and writer is not None else []  # committed is kept
        if len(kept):
            print(f"kept the {len(kept)} finished episodes in {cfg.out} (seeds {kept[0]}..{kept[-1]}); dataset now "
                  f"holds {writer.num_episodes} episodes", file=sys.stderr)
        raise
    finally:
        if writer is not None:
            writer.close()
        env.close()
    successes = sum(r.success for r in results)
    seeds = f", seeds {results[0].seed}..{results[-1].seed}" if results else ""
    print(f"recorded {len(results)} episodes ({sum(r.steps for r in results)} steps, "
          f"{successes}/{len(results)} successful{seeds}) to {cfg.out}; dataset now holds {writer.num_episodes} "
          "episodes")
    if len(results) < cfg.episodes:
        print(f"error: only {len(results)} of {cfg.episodes} episodes kept", file=sys.stderr)
        raise SystemExit(1)


def run_info(cfg: Info) -> None:
    from rich.console import Console
    from rich.table import Table

    from robot_rl.data.episodes import DatasetError, DatasetReader

    reader = DatasetReader(cfg.path)
    damage = reader.verify() if cfg.verify else reader.missing_chunks()
    if damage:
        for problem in damage:
            print(f"damaged: {problem}", file=sys.stderr)
        episodes = sorted({d.episode for d in damage})
        shown = ", ".join(map(str, episodes[:20])) + (", ..." if len(episodes) > 20 else "")
        hint = "" if cfg.verify else "; `robot-rl info --verify` also checks every value"
        raise DatasetError(f"{cfg.path}: {len(episodes)} of {reader.num_episodes} episodes are damaged "
                           f"(episodes {shown}; listed above){hint}")
    summary = reader.summary()
    summary["verified"] = bool(cfg.verify)
    if cfg.json:
        print(json.dumps(summary, indent=2))
        return
    console = Console()
    lengths = summary["episode_length"]
    console.print(f"[bold]{summary['path']}[/bold]  task {summary['task']}  robot {summary['robot']}  {summary['fps']:g} fps",
                  soft_wrap=True)
    console.print(  # one line, as a grep or a log reads it (rich would break it at 80 columns when piped)
        f"episodes {summary['episodes']}  steps {summary['steps']}  success rate {summary['success_rate']:.1%}  "
        f"intervention rate {summary['intervention_rate']:.1%}  episode length {lengths['min']}/"
        f"{lengths['mean']:.1f}/{lengths['max']} (min/mean/max)", soft_wrap=True
    )
    seeds = summary["seeds"]
    if seeds:
        console.print(f"seeds {seeds['min']}..{seeds['max']} ({seeds['count']} episodes seeded)")
    if summary["uncommitted_steps"]:
        console.print(f"[yellow]{summary['uncommitted_steps']} uncommitted steps (an interrupted episode) ignored")
    for note in summary["notes"]:
        console.print(f"[yellow]note: {note}")
    table = Table("key", "shape", "dtype", "on disk")
    for key, spec in summary["keys"].items():
        table.add_row(key, str(tuple(spec["shape"])), spec["dtype"], _human_bytes(summary["bytes_on_disk"][f"data/{key}"]))
    console.print(table)
    console.print(f"total on disk {_human_bytes(summary['total_bytes'])}")
    if cfg.verify:
        console.print(f"[green]verified: every value of all {summary['episodes']} episodes matches its checksum")


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def run_replay(cfg: Replay) -> None:
    from robot_rl.data.episodes import DatasetReader
    from robot_rl.data.video import write_video

    reader = DatasetReader(cfg.path)
    if not -reader.num_episodes <= cfg.episode < reader.num_episodes:
        raise IndexError(f"episode {cfg.episode} out of range: {cfg.path} has {reader.num_episodes} episodes")
    stored = [k for k, spec in reader.observation_spec.items() if spec.is_image]
    cameras = stored
    if cfg.cameras:
        cameras = [c if c.startswith("images/") else f"images/{c}" for c in cfg.cameras]
        missing = [c for c in cameras if c not in stored]
        if missing:
            raise ValueError(f"--cameras: {missing} not in {cfg.path}; stored cameras: {stored}")
    if not cameras:
        raise ValueError(
            f"{cfg.path} stores no camera frames (keys: {sorted(reader.observation_spec)}); "
            "record with --obs-mode pixels or state+pixels"
        )
    episode = reader.read_episode(cfg.episode, keys=cameras)  # verified: damage is an error, not black frames
    length = len(episode["action"])
    captions = [f"step {t + 1}/{length}" + ("  human" if episode["intervention"][t] else "") for t in range(length)]
    captions[-1] += "  success" if episode["success"] else "  failure"
    n = write_video(cfg.out, [episode["obs"][c] for c in cameras], fps=reader.fps, captions=captions)
    print(f"wrote {cfg.out}: episode {cfg.episode % reader.num_episodes}, {n} frames, cameras {cameras}, "
          f"success={episode['success']}")


def run_export(cfg: Export) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.data.episodes import DatasetReader
    from robot_rl.data.lerobot import export_lerobot

    total = DatasetReader(cfg.path).num_episodes
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]exporting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as progress:
        bar = progress.add_task("export", total=total)
        info = export_lerobot(cfg.path, cfg.out, crf=cfg.crf, on_episode=lambda index: progress.advance(bar))
    print(f"wrote {cfg.out}: LeRobot {info['codebase_version']} dataset, {info['total_episodes']} episodes, "
          f"{info['total_frames']} frames at {info['fps']} fps")


def run_import(cfg: Import) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.data.lerobot import import_lerobot

    console = Console(stderr=True)
    with Progress(TextColumn("[bold]importing"), BarColumn(), TextColumn("episode {task.completed}"),
                  TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal) as progress:
        bar = progress.add_task("import", total=None)
        count = import_lerobot(cfg.path, cfg.out, task=cfg.task, on_episode=lambda index: progress.advance(bar))
    print(f"imported {count} episodes from {cfg.path} into {cfg.out}")


def run_doctor(cfg: Doctor) -> None:
    from robot_rl.ros.doctor import run_doctor as doctor

    # bad input: ValueError
    status = doctor(cfg.robot, cfg.duration, cfg.json, cfg.namespace, cfg.domain_id, cfg.wait, timing=cfg.timing)
    if status:
        raise SystemExit(status)


def run_launch(cfg: Launch) -> None:
    from robot_rl.ros.launch import launch
    from robot_rl.ros.launch_file import LaunchError

    try:
        status = launch(cfg.file, cfg.arguments, domain_id=cfg.domain_id, grace_s=cfg.grace_s, dry_run=cfg.dry_run)
    except LaunchError as exc:  # a usage error: one line, exit status 2
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if status:
        raise SystemExit(status)


def run_train_reward(cfg: TrainReward) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.agents.reward_classifier import check_output_folder, save_atomically, summary_line, train_reward_classifier

    check_output_folder(cfg.out)
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]training reward classifier"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[loss]}"), console=console, transient=True,
                  disable=not console.is_terminal) as progress:
        bar = progress.add_task("train", total=cfg.config.steps, loss="")
        classifier, metrics = train_reward_classifier(
            cfg.dataset, cfg.config,
            on_progress=lambda step, loss: progress.update(bar, completed=step, loss=f"loss {loss:.4f}"))
    save_atomically(classifier, cfg.out, metrics)
    print(summary_line(cfg.out, metrics))


def run_label(cfg: Label) -> None:
    from robot_rl.agents.reward_classifier import FrameLabels, label_interactively, parse_frames

    chosen = [name for name in ("success", "failure", "clear") if getattr(cfg, name)]
    if len(chosen) > 1:
        raise ValueError(f"give one of --success, --failure, --clear, not {' and '.join('--' + c for c in chosen)}")
    if cfg.import_ is not None and (cfg.frames is not None or chosen):
        raise ValueError("--import applies a labels file: give it without --frames / --success / --failure / --clear")
    if cfg.frames is None and chosen:
        raise ValueError(f"--{chosen[0]} needs --episode N --frames A:B")
    if cfg.frames is not None and (cfg.episode is None or not chosen):
        raise ValueError("--frames needs --episode N and one of --success, --failure, --clear")
    if cfg.import_ is None and cfg.frames is None:
        counts = label_interactively(cfg.path, episode=cfg.episode or 0, cameras=cfg.cameras)
        print(f"{cfg.path}: {counts['success']} success and {counts['failure']} failure frames labelled in "
              f"{counts['episodes']} episodes")
        return
    labels = FrameLabels.load(cfg.path)
    if cfg.import_ is not None:
        changed = labels.import_file(cfg.import_)
        what = f"applied {changed} frame labels from {cfg.import_}"
    else:
        episode = labels.episode_index(cfg.episode)
        frames = parse_frames(cfg.frames, labels.frames(episode))
        changed = labels.set(episode, frames, {"success": True, "failure": False, "clear": None}[chosen[0]])
        verb = "cleared" if chosen[0] == "clear" else f"labelled {chosen[0]}:"
        what = f"{verb} {changed} frames of episode {episode} ({frames.start}..{frames.stop - 1})"
    path = labels.save()
    counts = labels.counts()
    print(f"{what}; {path} now holds {counts['success']} success and {counts['failure']} failure frames in "
          f"{counts['episodes']} episodes")


def run_train(cfg: Train, args: list[str]) -> None:
    from robot_rl.apps.train import load_run, train

    if cfg.resume is None:
        train(cfg.config)
        return
    saved, _ = load_run(cfg.resume)
    # Parse the command line again with the run's saved config as the defaults: what differs was asked for.
    requested = parse_args(Train, args[args.index("train") + 1:], prog="robot-rl train",
                           default=Train(saved, cfg.resume))
    train(requested.config, resume=cfg.resume)


def run_eval(cfg: Eval) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.sim.evaluate import evaluate_policy_file

    progress = Progress(TextColumn("[bold]evaluating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    bar = progress.add_task("eval", total=cfg.episodes)

    def on_episode(result) -> None:
        if not progress.live.is_started:  # drawn from the first episode on: bad input fails with nothing drawn
            progress.start()
        progress.advance(bar)

    try:
        summary = evaluate_policy_file(
            cfg.policy, task=cfg.task, episodes=cfg.episodes, seed=cfg.seed, obs_mode=cfg.obs_mode,
            image_size=cfg.image_size, out=cfg.out, video=cfg.video, video_episodes=cfg.video_episodes,
            on_episode=on_episode, device=cfg.device, inference_steps=cfg.inference_steps)
    finally:
        if progress.live.is_started:
            progress.stop()
    print(json.dumps(summary))


class _StopOnceTraining:
    """`should_stop` of train-bc / distill: until its first call (the first step) a stop request raises at once
    (loading data and building the model stop promptly, and nothing has been made that a stop would leave
    behind); from then on it only sets the flag the optimisation loop checks (robot_rl.apps.train.StopSignals)."""

    def __init__(self) -> None:
        self.stop = None

    def __call__(self) -> bool:
        if self.stop is None:
            from robot_rl.apps.train import StopSignals

            self.stop = StopSignals().__enter__()
        return self.stop()

    @property
    def signum(self) -> int | None:
        return self.stop.signum if self.stop is not None else interrupts.requested()

    def close(self) -> None:
        if self.stop is not None:
            self.stop.__exit__(None, None, None)


def _fit_with_progress(label: str, steps: int, validation_label: str, fit, evaluation_fields, what: str,
                       out: Path) -> None:
    """Run `fit(on_progress=..., should_stop=...)` (train_bc or distill) under a progress bar and Ctrl-C / SIGTERM
    handling, then print its summary as JSON (with `evaluation_fields(evaluation)`) and its report and policy
    paths; raise TrainingInterrupted when a stop request ended it after its first step. Stopped before that, the
    run never got going: its `out` folder is removed (it was new or empty) and the interrupt raised."""
    import shutil

    from robot_rl.apps.train import TrainingInterrupted

    made = interrupts.first_missing(out)
    was_empty = made is None and out.is_dir() and not any(out.iterdir())
    stop = _StopOnceTraining()
    try:
        _fit_and_report(label, steps, validation_label, fit, evaluation_fields, what, stop)
    except TrainingInterrupted:  # stopped after its first step: the policy trained so far and the report are kept
        raise
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt) or interrupts.requested() is not None:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
            elif was_empty:
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
        raise
    finally:
        stop.close()


def _fit_and_report(label: str, steps: int, validation_label: str, fit, evaluation_fields, what: str,
                    stop: _StopOnceTraining) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from robot_rl.apps.progress import ProgressLines
    from robot_rl.core.report import json_safe
    from robot_rl.apps.train import TrainingInterrupted

    console = Console(stderr=True)
    lines = ProgressLines(label, steps, enabled=not console.is_terminal)  # tee / nohup / a log file: plain lines
    with Progress(
            TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[loss]}"), console=console, transient=True,
            disable=not console.is_terminal) as progress:
        bar = progress.add_task(label, total=steps, loss="")

        def on_progress(step: int, loss: float, validation: float | None) -> None:
            text = f"loss {loss:.4f}" + ("" if validation is None else f"  {validation_label} {validation:.4f}")
            progress.update(bar, completed=step, loss=text)
            lines.update(step, text)

        summary = fit(on_progress=on_progress, should_stop=stop)
    if summary["stopped"] and not summary["steps"]:
        raise interrupts.interrupt_for(stop.signum)  # never got going: _fit_with_progress removes the folder
    evaluation = summary["evaluation"]
    print(json.dumps(json_safe({k: v for k, v in summary.items() if k != "evaluation"}
                               | (evaluation_fields(evaluation) if evaluation else {})), allow_nan=False))
    print(f"report: {Path(summary['out']) / 'report.md'}  policy: {summary['policy']}", file=sys.stderr)
    if summary["stopped"]:
        raise TrainingInterrupted(stop.signum or signal.SIGINT, summary["steps"], steps, Path(summary["out"]),
                                  f"interrupted at step {summary['steps']}/{steps}; the {what} trained so far "
                                  f"is in {summary['policy']}")


def run_train_bc(cfg: TrainBCConfig) -> None:
    from robot_rl.apps.train_bc import train_bc

    _fit_with_progress("train-bc", cfg.steps, "validation", lambda **callbacks: train_bc(cfg, **callbacks),
                       lambda evaluation: {"success_rate": evaluation["success_rate"],
                                           "eval_episodes": evaluation["episodes"]}, "policy", Path(cfg.out))


def run_distill(cfg: DistillConfig) -> None:
    from robot_rl.apps.distill import distill

    _fit_with_progress("distill", cfg.steps, "gap to teacher", lambda **callbacks: distill(cfg, **callbacks),
                       lambda evaluation: {"student_success_rate": evaluation["student"]["success_rate"],
                                           "teacher_success_rate": evaluation["teacher"]["success_rate"],
                                           "eval_episodes": evaluation["student"]["episodes"]}, "student",
                       Path(cfg.out))


# SIGTERM raised as an interrupt (robot_rl.core.interrupts: every command takes over SIGINT and SIGTERM at start).
Terminated = interrupts.Terminated


# OSError numbers that mean the path given on the command line cannot be used (usage errors, exit status 2).
PATH_ERRNOS = frozenset({errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENOENT, errno.EACCES, errno.EPERM,
                         errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP})


class UsageError(SystemExit):
    """Exit status 2 for bad input, carrying the one-line message that was printed (its str())."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _join_docstring_lines() -> None:
    """Make tyro join the lines of a field docstring into one help paragraph. tyro (1.0.x) removes single line breaks
    before it dedents, so it keeps the break before every indented continuation line and the help text breaks
    mid-sentence at whatever width the terminal has; dedenting first (as the docstring's own rules do) fixes it."""
    import inspect

    from tyro import _strings

    original = getattr(_strings.remove_single_line_breaks, "__wrapped__", _strings.remove_single_line_breaks)

    def remove_single_line_breaks(helptext: str) -> str:
        return original(inspect.cleandoc(helptext))

    remove_single_line_breaks.__wrapped__ = original
    _strings.remove_single_line_breaks = remove_single_line_breaks


def _unrecognized_args_error(prog: str, unrecognized_args_and_progs, subparser_frontier, args, parser_spec,
                             **_ignored):
    """Replaces tyro's box for input it does not know (tyro 1.0.x's `unrecognized_args_error`): a ValueError of one
    line, naming the first unknown command or option and the closest known one (robot_rl.core.suggest)."""
    from tyro._backends._tyro_help_formatting import recursive_arg_search

    from robot_rl.core.suggest import closest

    token, where = unrecognized_args_and_progs[0]
    commands = [name for spec in subparser_frontier.values() for name in spec.parser_from_name]
    if commands:  # no command chosen yet: the first word should have been one
        if token.startswith("-"):
            raise ValueError(f"{token}: give a command first ({prog} COMMAND [OPTIONS]); commands: "
                             f"{', '.join(commands)}")
        close = closest(token, commands)
        hint = f" (did you mean {close!r}?)" if close else ""
        raise ValueError(f"unknown command {token!r}{hint}; commands: {', '.join(commands)}")
    options = [(t, p) for t, p in unrecognized_args_and_progs if t.startswith("-")]
    if not options:
        raise ValueError(f"unexpected argument {token!r}; see {where} --help")
    (option, where), name = options[0], options[0][0].partition("=")[0]
    known, _, _ = recursive_arg_search(args=args, parser_spec=parser_spec, prog=prog.partition(" ")[0],
                                       unrecognized_arguments=set())
    best = max((a.subcommand_match_score for a in known), default=0)  # the options of the command given
    close = closest(name, [flag for a in known if a.subcommand_match_score == best for flag in a.option_strings])
    hint = f" (did you mean {close}?)" if close else ""
    raise ValueError(f"unrecognized option {name}{hint}; see {where} --help")


@contextlib.contextmanager
def _one_line_unrecognized_args():
    """While active, tyro reports an unknown command or option with `_unrecognized_args_error`."""
    from tyro._backends import _tyro_help_formatting

    original = _tyro_help_formatting.unrecognized_args_error
    _tyro_help_formatting.unrecognized_args_error = _unrecognized_args_error
    try:
        yield
    finally:
        _tyro_help_formatting.unrecognized_args_error = original


MULTI_VALUE_OPTIONS = ("--dataset",)
"""Options taking several values that may also be repeated (argparse alone would keep only the last one)."""


def merge_repeated_options(args: list[str], options=MULTI_VALUE_OPTIONS) -> list[str]:
    """`--dataset A --dataset B C` -> `--dataset A B C` (at the first occurrence) for each of `options`."""
    merged: list = []
    values: dict[str, list[str]] = {}
    current = None  # a multi-value option whose values are being read
    for token in args:
        if token.startswith("-") and not token.lstrip("-").replace(".", "", 1).isdigit():
            current = token if token in options else None
            if current is None:
                merged.append(token)
            elif current not in values:
                values[current] = []
                merged += [current, values[current]]
        elif current is not None:
            values[current].append(token)
        else:
            merged.append(token)
    return [item for token in merged for item in (token if isinstance(token, list) else [token])]


def parse_args(cls, args: list[str], **kwargs):
    """`tyro.cli`, except that a value a config rejects (a ValueError in `__post_init__`, a bad number or choice),
    an unknown command or an unknown option raises a ValueError naming it, with the closest known name for a typo
    (main prints it as one `error:` line), instead of tyro's multi-line box; a repeated multi-value option
    (`--dataset A --dataset B`) keeps all its values."""
    from tyro._errors import InstantiationFailure, InvalidChoice, MissingArgs, on_parse_error

    from robot_rl.core.suggest import closest

    def one_line(event) -> None:
        option = getattr(event, "argument", None)
        option = "/".join(option.lowered.name_or_flags) if option is not None else None
        if isinstance(event, InstantiationFailure):
            raise ValueError(f"{option}: {event.message}" if option else event.message)
        if isinstance(event, InvalidChoice):
            raise ValueError(f"{option}: {event.value!r} is not one of {', '.join(event.choices)}")
        if isinstance(event, MissingArgs) and event.missing_arguments:
            missing = [a.arg.lowered.name_or_flags[0] if a.arg.lowered.name_or_flags[0].startswith("-")
                       else str(a.arg.lowered.metavar) for a in event.missing_arguments]  # a positional: its metavar
            where = f"{event.prog} {event.missing_arguments[0].local_root_parser.prog_suffix}".strip()
            given = [token.partition("=")[0] for token in args if token.startswith("--")]
            for flag in missing:  # a required option mistyped: name the typo, not only what is missing
                typo = closest(flag, [token for token in given if token not in missing])
                if typo is not None:
                    raise ValueError(f"unrecognized option {typo} (did you mean {flag}?); see {where} --help")
            raise ValueError(f"missing {', '.join(missing)}; see {where} --help")

    _join_docstring_lines()
    with on_parse_error(one_line), _one_line_unrecognized_args():
        return tyro.cli(cls, args=merge_repeated_options(args), **kwargs)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `robot-rl` console script.

    Exit status: 0 done, 1 a job failed, 2 bad input (one `error: ...` line on stderr, nothing half-made),
    130 / 143 stopped by SIGINT / SIGTERM.
    """
    from robot_rl.apps.train import TrainingInterrupted

    args = sys.argv[1:] if argv is None else list(argv)
    try:
        cfg = parse_args(Command, args, prog="robot-rl", description="robot_rl: real-robot RL with a MuJoCo mirror.")
        # SIGINT / SIGTERM raise an interrupt (train, train-bc, distill, the launcher and the ROS recorder defer it
        # to their loops' safe points); one eaten on the way is raised again (robot_rl.core.interrupts)
        with interrupts.handling():
            match cfg:
                case Train():
                    run_train(cfg, args)
                case Eval():
                    run_eval(cfg)
                case Record():
                    run_record(cfg)
                case Info():
                    run_info(cfg)
                case Replay():
                    run_replay(cfg)
                case Export():
                    run_export(cfg)
                case Import():
                    run_import(cfg)
                case Launch():
                    run_launch(cfg)
                case Doctor():
                    run_doctor(cfg)
                case Status():
                    from robot_rl.apps.run_status import watch

                    watch(cfg.run_dir, cfg.watch, cfg.json, clear=cfg.watch is not None and sys.stdout.isatty())
                case TrainReward():
                    run_train_reward(cfg)
                case Label():
                    run_label(cfg)
                case TrainBCConfig():
                    run_train_bc(cfg)
                case DistillConfig():
                    run_distill(cfg)
                case ValidateConfig():
                    from robot_rl.apps.validate import run_validate

                    if run_validate(cfg)["verdict"] != "pass":
                        raise SystemExit(1)  # a script or CI gates on the verdict
                case ReplayInSimConfig():
                    from robot_rl.apps.replay_in_sim import run_replay_in_sim

                    run_replay_in_sim(cfg)
                case Certs(step=CertsCa() as step):
                    from robot_rl.ros.net.certs import ca_instructions, create_ca

                    print(ca_instructions(create_ca(step.out, step.server, port=step.port, days=step.days,
                                                    dh=step.dh)))
                case Certs(step=CertsRequest() as step):
                    from robot_rl.ros.net.certs import create_request, request_instructions

                    print(request_instructions(create_request(step.folder, step.host)))
                case Certs(step=CertsSign() as step):
                    from robot_rl.ros.net.certs import sign_instructions, sign_request

                    print(sign_instructions(sign_request(step.ca, step.request, step.role, days=step.days,
                                                         out=step.out)))
    except TrainingInterrupted as exc:  # checkpointed and reported: one line saying how to resume
        interrupts.report_once()
        print(exc, file=sys.stderr)
        raise SystemExit(exc.exit_status) from None
    except KeyboardInterrupt as exc:
        interrupts.exit_stopped(exc)  # one line, 130 / 143
    except Exception as exc:
        if interrupts.requested() is not None:  # whatever a stopped command ended with (a converted interrupt)
            interrupts.exit_stopped(exc)
        _exit_on_error(exc)
        raise
    if interrupts.requested() is not None:  # stopped, and the interrupt eaten on the way: still a stopped command
        interrupts.exit_stopped()


def _exit_on_error(exc: Exception) -> None:
    """Bad input (and a path that cannot be used): one `error:` line and exit status 2; other OSErrors: status 1;
    anything else returns (a bug: its traceback follows)."""
    from robot_rl.data.episodes import DatasetError

    if isinstance(exc, (DatasetError, ValueError, IndexError)):  # bad input: a clear one-line error, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        raise UsageError(f"error: {exc}") from None
    if isinstance(exc, OSError):  # e.g. an output path below a file: one line; exit 2 when the path given is the problem
        where = ": ".join(str(name) for name in (exc.filename, exc.filename2) if name is not None)
        message = f"error: {where + ': ' if where else ''}{exc.strerror or exc}"
        print(message, file=sys.stderr)
        if exc.errno in PATH_ERRNOS:
            raise UsageError(message) from None
        raise SystemExit(1) from None


if __name__ == "__main__":
    interrupts.install_for_process()
    try:
        main()
    finally:
        interrupts.record_only()
