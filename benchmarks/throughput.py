"""Env-stepping throughput: in-process vs subprocess stepping, and training steps per second.

    python benchmarks/throughput.py envs --env simple_spread_v3 --num-envs 8 --workers 0 2 4
    python benchmarks/throughput.py train --algorithm ddpg --env Pendulum-v1 --steps 3000
    python benchmarks/throughput.py train --algorithm maddpg --env simple_spread_v3 --num-envs 8 \
        --steps 8000 --env-workers 2
    python benchmarks/throughput.py train --algorithm wqmix --env simple_spread_v3 --num-envs 8 \
        --steps 6000 --set recurrent=true

``envs`` steps the batched env with uniformly random actions and prints env steps/s (counted over
all copies) for each worker count (0 = in process). ``train`` runs ``learners.training.train``
with the algorithm's defaults (``--set key=value`` overrides a hyperparameter, JSON values) and
prints the training env steps/s beside the bare env's figure measured the same way.

    python benchmarks/throughput.py onpolicy --algorithms mappo ippo --env simple_spread_v3

``onpolicy`` measures MAPPO/IPPO training (rollout + update, no evaluation or checkpoints) against
the bare env with random actions, interleaving the two, one rollout's worth of steps each, so that
a busy machine slows both alike; it prints the medians and their ratio.

``train`` and ``onpolicy`` take ``--device cuda`` (or ``auto``) to run the learner on a GPU; the
environments always step on the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learners.enums import EnvSuite  # noqa: E402
from learners.envs.base import EnvInfo, VecEnv  # noqa: E402
from learners.envs.catalogue import MPE_ENVS, make_vec_env  # noqa: E402
from learners.spec import EnvSpec  # noqa: E402


def suite_of(env_id: str) -> EnvSuite:
    return EnvSuite.MPE if env_id in MPE_ENVS else EnvSuite.GYMNASIUM


def random_actions(info: EnvInfo, rng: np.random.Generator) -> np.ndarray:
    shape = (info.num_envs, info.num_agents)
    if info.action_kind == "discrete":
        return rng.integers(0, info.action_dim, shape)
    return rng.uniform(-1.0, 1.0, (*shape, info.action_dim)).astype(np.float32)


def env_steps_per_second(env: VecEnv, steps: int, repeats: int) -> list[float]:
    """Batched steps with random actions (pre-drawn, so drawing is not timed), per repeat."""
    rng = np.random.default_rng(0)
    actions = [random_actions(env.info, rng) for _ in range(64)]
    env.reset(0)
    for k in range(50):  # warm up caches and the worker processes
        env.step(actions[k % 64])
    figures = []
    for _ in range(repeats):
        start = time.perf_counter()
        for k in range(steps):
            env.step(actions[k % 64])
        figures.append(steps * env.info.num_envs / (time.perf_counter() - start))
    return figures


def bench_envs(args: argparse.Namespace) -> None:
    spec = EnvSpec(suite=suite_of(args.env), id=args.env, num_envs=args.num_envs, kwargs={})
    print(f"{args.env}, {args.num_envs} envs, {args.steps} batched steps x {args.repeats}")
    for workers in args.workers:
        env = make_vec_env(spec, seed=0, workers=workers)
        figures = env_steps_per_second(env, args.steps, args.repeats)
        env.close()
        kind = "in process" if workers <= 1 else f"{workers} worker processes"
        print(
            f"  {kind:>20}: median {statistics.median(figures):9.0f} env steps/s "
            f"(runs: {', '.join(f'{f:.0f}' for f in figures)})"
        )


def bench_train(args: argparse.Namespace) -> None:
    from benchmarks.learning import default_spec, parse_overrides
    from learners.envs import catalogue
    from learners.hooks import MemoryHooks
    from learners.training import train

    if args.env_workers is not None:  # override the default stepping rule for this run
        workers = args.env_workers
        catalogue.default_workers = lambda num_envs, cpus=None: workers

    spec = default_spec(
        args.algorithm, args.backend, args.env, seed=0, steps=args.steps,
        hyperparameters=parse_overrides(args.set), device=args.device,
    )  # fmt: skip
    spec = spec.model_copy(update={"env": spec.env.model_copy(update={"num_envs": args.num_envs})})
    env = make_vec_env(spec.env, seed=0)
    kind = type(env).__name__
    bare = statistics.median(env_steps_per_second(env, 500, 3))
    env.close()
    hooks = MemoryHooks()
    start = time.perf_counter()
    train(spec, hooks)
    wall = time.perf_counter() - start
    print(
        f"{args.algorithm}/{args.backend} on {args.env}, {args.num_envs} envs ({kind}), "
        f"{args.steps} steps, device {args.device}"
    )
    print(f"  bare env (random actions): {bare:9.0f} env steps/s")
    print(f"  training, whole run:      {args.steps / wall:9.0f} env steps/s ({wall:.1f} s)")
    rates = [p.value for p in hooks.points if p.name == "perf/steps_per_second"]
    if rates:
        print(f"  training, last report:    {rates[-1]:9.0f} env steps/s")


def bench_on_policy(args: argparse.Namespace) -> None:
    from learners.backends import resolve_device
    from learners.buffers.rollout import RolloutBuffer
    from learners.enums import Backend, Device
    from learners.registry import entry
    from learners.runners.on_policy import collect_rollout

    spec = EnvSpec(suite=suite_of(args.env), id=args.env, num_envs=args.num_envs, kwargs={})
    env = make_vec_env(spec, seed=0)
    rng = np.random.default_rng(0)
    actions = [random_actions(env.info, rng) for _ in range(64)]
    device = resolve_device(Backend(args.backend), Device(args.device))
    print(f"{args.env}, {args.num_envs} envs, {args.rollouts} rollouts per figure, device {device}")
    for algorithm in args.algorithms:
        algo = entry(algorithm)
        config = algo.config.resolve(spec.suite, spec.id, {})
        learner = algo.learner_class(args.backend)(config, env.info, device, 0)
        hidden = config.rnn_hidden_size if config.recurrent else None
        buffer = RolloutBuffer(env.info, config.rollout_length, hidden)
        steps = config.rollout_length * env.info.num_envs
        obs, memory = env.reset(), learner.initial_memory(env.info.num_envs)
        bare, acting, training = [], [], []
        for rollout in range(args.rollouts + 1):
            start = time.perf_counter()
            for k in range(config.rollout_length):
                env.step(actions[k % 64])
            middle = time.perf_counter()
            buffer.reset()
            obs, memory = collect_rollout(env, learner, buffer, obs, memory)
            collected = time.perf_counter()
            learner.update(buffer)
            end = time.perf_counter()
            if rollout:  # the first round warms up
                bare.append(steps / (middle - start))
                acting.append(steps / (collected - middle))
                training.append(steps / (end - middle))
        b, a, t = (statistics.median(x) for x in (bare, acting, training))
        print(
            f"  {algorithm}/{args.backend}: bare env {b:7.0f}  rollout only {a:7.0f} "
            f"({a / b:4.0%})  training {t:7.0f} env steps/s ({t / b:4.0%} of the bare env)"
        )
    env.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    envs = sub.add_parser("envs", help="bare env stepping, in process vs worker processes")
    envs.add_argument("--env", default="simple_spread_v3")
    envs.add_argument("--num-envs", type=int, default=8)
    envs.add_argument("--steps", type=int, default=1000)
    envs.add_argument("--repeats", type=int, default=3)
    envs.add_argument("--workers", type=int, nargs="+", default=[0, 2, 4])
    tr = sub.add_parser("train", help="training env steps/s vs the bare env")
    tr.add_argument("--algorithm", default="ddpg")
    tr.add_argument("--backend", default="torch")
    tr.add_argument("--env", default="Pendulum-v1")
    tr.add_argument("--num-envs", type=int, default=1)
    tr.add_argument("--steps", type=int, default=3000)
    tr.add_argument(
        "--env-workers", type=int, default=None, help="worker processes (0: in process)"
    )
    tr.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="hyperparameters")
    tr.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")
    on = sub.add_parser("onpolicy", help="MAPPO/IPPO training steps/s vs the bare env")
    on.add_argument("--algorithms", nargs="+", default=["mappo", "ippo"])
    on.add_argument("--backend", default="torch")
    on.add_argument("--env", default="simple_spread_v3")
    on.add_argument("--num-envs", type=int, default=8)
    on.add_argument("--rollouts", type=int, default=7)
    on.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")
    args = parser.parse_args()
    commands = {"envs": bench_envs, "train": bench_train, "onpolicy": bench_on_policy}
    commands[args.command](args)


if __name__ == "__main__":
    main()
