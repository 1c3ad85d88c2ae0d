"""Render one evaluation episode of a checkpoint's policy as an animated GIF.

``python -m learners.replay --checkpoint step-000000001000.ckpt --out replay.gif``

The episode is the first one every periodic evaluation of the run plays (the evaluation seed, copy
0, episode 0) and the policy acts as it does there: greedily. Frames are the env's own ``rgb_array``
renderings (pygame for MPE and the classic-control envs, MuJoCo's offscreen renderer for the MuJoCo
ones), so no display is needed. The API runs this as a subprocess: it never imports a deep-learning
framework itself, and a crash in a renderer cannot take the API down.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from learners.envs.base import Observation, VecEnv

# Headless rendering, set before pygame or MuJoCo are imported.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
os.environ.setdefault("MUJOCO_GL", "egl")

MAX_FRAMES = 400
MAX_SIDE = 320
# The exit status when a module rendering needs is missing (argparse uses 2 for bad arguments).
EXIT_NOT_INSTALLED = 3


@dataclass(frozen=True)
class ReplayInfo:
    """What was rendered."""

    frames: int
    episode_return: float | None
    """The episode's return (mean over agents); None when ``max_frames`` cut it short."""
    episode_length: int


def _shrink(frame: NDArray[np.uint8], max_side: int) -> Any:
    from PIL import Image

    image = Image.fromarray(np.ascontiguousarray(frame[..., :3]))
    scale = max_side / max(image.size)
    if scale < 1:
        image = image.resize(
            (round(image.width * scale), round(image.height * scale)), Image.Resampling.BILINEAR
        )
    return image


def installed_backend(checkpoint: Path) -> str:
    """The backend to act with: the one that wrote the checkpoint when its framework is installed
    here, else the first installed one that can load its policy (an API host may have only
    torch)."""
    from learners.checkpoint import read_manifest

    manifest = read_manifest(checkpoint)
    for backend in [manifest.backend, *manifest.policy_backends]:
        # A backend's value is its framework's import name (torch, tensorflow, mindspore).
        if importlib.util.find_spec(str(backend)) is not None:
            return str(backend)
    return str(manifest.backend)  # load_policy then fails with the missing module's name


def play(
    checkpoint: Path, max_frames: int = MAX_FRAMES
) -> tuple[list[NDArray[np.uint8]], ReplayInfo]:
    """The frames of one greedy evaluation episode of the policy in ``checkpoint``."""
    from learners import rng
    from learners.envs.factory import make_vec_env
    from learners.policy import load_policy
    from learners.spec import ExperimentSpec

    policy = load_policy(checkpoint, backend=installed_backend(checkpoint))
    spec = ExperimentSpec.model_validate(policy.manifest.spec)
    env = make_vec_env(spec.env, rng.derive_seed(spec.seed, "eval"), num_envs=1, render=True)
    try:
        return play_episode(env, policy.act, max_frames)
    finally:
        env.close()


def play_episode(
    env: VecEnv, act: Callable[[Observation], NDArray[Any]], max_frames: int = MAX_FRAMES
) -> tuple[list[NDArray[np.uint8]], ReplayInfo]:
    """The frames of episode 0 of copy 0 of ``env`` (made with ``render=True`` and one copy),
    acting with ``act``; stops after ``max_frames`` frames."""
    obs = env.reset(episode_index=np.zeros(1, np.int64))
    frames = [env.render().copy()]
    while len(frames) < max_frames:
        obs, transition = env.step(act(obs))
        if transition.episode_lengths[0] > 0:
            # The copy has already been reset: its frame would show the next episode.
            return frames, ReplayInfo(
                len(frames),
                float(transition.episode_returns[0]),
                int(transition.episode_lengths[0]),
            )
        frames.append(env.render().copy())
    return frames, ReplayInfo(len(frames), None, len(frames) - 1)


def write_gif(
    frames: Sequence[NDArray[np.uint8]], out: Path, fps: int = 20, max_side: int = MAX_SIDE
) -> None:
    """Write ``frames`` to ``out`` as a looping GIF, each frame at most ``max_side`` pixels wide."""
    images = [_shrink(f, max_side) for f in frames]
    images[0].save(
        out,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=max(1, round(1000 / fps)),
        loop=0,
    )


def render(
    checkpoint: Path, out: Path, *, max_frames: int = MAX_FRAMES, fps: int = 20
) -> ReplayInfo:
    """Render the checkpoint's evaluation episode to the GIF ``out``."""
    frames, info = play(checkpoint, max_frames)
    write_gif(frames, out, fps)
    return info


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: render, then print what was rendered as one JSON line."""
    parser = argparse.ArgumentParser(
        prog="python -m learners.replay", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--checkpoint", type=Path, required=True, help="a MARLForge checkpoint file"
    )
    parser.add_argument("--out", type=Path, required=True, help="where to write the GIF")
    parser.add_argument("--max-frames", type=int, default=MAX_FRAMES, help="stop after this many")
    parser.add_argument("--fps", type=int, default=20, help="frames per second of the GIF")
    args = parser.parse_args(argv)
    try:
        info = render(args.checkpoint, args.out, max_frames=args.max_frames, fps=args.fps)
    except ModuleNotFoundError as exc:
        # The checkpoint's framework (or the env's renderer) is not installed here: a fact about
        # this machine, not about the checkpoint, so the caller can say so.
        print(f"{exc.name} is not installed where the replay is rendered", file=sys.stderr)
        return EXIT_NOT_INSTALLED
    print(json.dumps(asdict(info)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
