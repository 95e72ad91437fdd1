"""The `robot-rl` command: one entry point, a subcommand per job, typed dataclass configs. This module is the command
line itself (the configs, parsing with one-line errors, dispatch, exit statuses); the work of a command longer than a
few lines is in its own module of robot_rl.apps (record, datasets, evaluate, ros_commands, ...)."""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import contextlib
import dataclasses
import errno
import sys
from pathlib import Path
from typing import Annotated, Literal

import tyro

from robot_rl.core import interrupts
from robot_rl.apps.distill import DistillConfig
from robot_rl.agents.reward_classifier import RewardClassifierConfig
from robot_rl.sim.evaluate import EVAL_SEED_OFFSET
from robot_rl.training.config import TrainConfig
from robot_rl.apps.train_bc import TrainBCConfig
from robot_rl.apps.replay_in_sim import ReplayInSimConfig
from robot_rl.apps.datasets import run_export, run_import, run_info, run_replay
from robot_rl.apps.evaluate import run_eval
from robot_rl.apps.fit_commands import run_distill, run_train_bc
from robot_rl.apps.record import run_record
from robot_rl.apps.reward_training import run_label, run_train_reward
from robot_rl.apps.ros_commands import run_doctor, run_launch
from robot_rl.ros.net.secure import DEFAULT_CA_DAYS, DEFAULT_DAYS as DEFAULT_CERT_DAYS, DEFAULT_PORT as SECURE_PORT
from robot_rl.sim.validation import ValidateConfig

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


def run_train(cfg: Train, args: list[str]) -> None:
    from robot_rl.training.run_folder import load_run
    from robot_rl.apps.train import train

    if cfg.resume is None:
        train(cfg.config)
        return
    saved, _ = load_run(cfg.resume)
    # Parse the command line again with the run's saved config as the defaults: what differs was asked for.
    requested = parse_args(Train, args[args.index("train") + 1:], prog="robot-rl train",
                           default=Train(saved, cfg.resume))
    train(requested.config, resume=cfg.resume)


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
    from robot_rl.training.pacing import TrainingInterrupted

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
