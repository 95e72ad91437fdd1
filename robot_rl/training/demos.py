"""A run's scripted demos: recorded in the sim into its folder (``demos.zarr``), whole or not at all."""

from __future__ import annotations

import shutil
from pathlib import Path

from robot_rl.sim.evaluate import StopRequested
from robot_rl.training.config import TrainConfig

DEMO_SEED_OFFSET = 2_000_000


def record_demos(cfg: TrainConfig, run_dir: Path, *, should_stop=None, on_episode=None):
    """Scripted, successful demos in the run folder (or the given dataset); returns the dataset.

    `on_episode(kept, wanted)` after every recorded episode; `should_stop()` is checked after every env step: when
    it returns True nothing is kept (the partial dataset is removed) and StopRequested is raised."""
    from robot_rl.data.episodes import EpisodeDataset
    from robot_rl.sim.loop import make_env, record_episodes, writer_for_env
    from robot_rl.sim.expert import make_expert

    if cfg.demo_path is not None:
        return EpisodeDataset(cfg.demo_path)
    path = run_dir / "demos.zarr"
    if cfg.demos and not (path / "zarr.json").exists():
        # Recorded aside and moved into place when complete: a run killed while recording (even by kill -9) records
        # its demos again rather than training on a partial set.
        partial = run_dir / "demos.partial.zarr"
        shutil.rmtree(partial, ignore_errors=True)
        kept = 0

        def episode_done(result, keep: bool) -> None:
            nonlocal kept
            kept += keep
            if on_episode is not None:
                on_episode(kept, cfg.demos)

        try:
            env = make_env(cfg.task, **cfg.env_settings())
            try:
                with writer_for_env(env, partial, cfg.task, attrs={"policy": "scripted"}) as writer:
                    record_episodes(
                        env, make_expert(env, seed=cfg.seed), writer, cfg.demos, seed=cfg.seed + DEMO_SEED_OFFSET,
                        only_successes=True, on_episode=episode_done, should_stop=should_stop,
                    )
            finally:
                env.close()
            if should_stop is not None and should_stop():
                raise StopRequested
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        if (partial / "zarr.json").exists():
            shutil.rmtree(path, ignore_errors=True)
            partial.rename(path)
    return EpisodeDataset(path) if (path / "zarr.json").exists() else None
