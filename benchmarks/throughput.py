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
    python benchmarks/throughput.py onpolicy --engines mpe2 vector

``onpolicy`` measures MAPPO/IPPO training (rollout + update, no evaluation or checkpoints) against
the bare env with random actions, interleaving the two, one rollout's worth of steps each, so that
a busy machine slows both alike; it prints the medians and their ratio. ``--engines mpe2 vector``
runs each algorithm on both mpe engines (``env.engine``), their rounds interleaved, and prints the
vector engine's training figure as a multiple of mpe2's.

    python benchmarks/throughput.py onpolicy --engines vector --flops

``--flops`` (torch) also looks inside one update: the floating-point operations of its matrix
products (``torch.utils.flop_counter``, forward and backward passes) per env step and the rate
that makes over the update's median time; the operators it dispatches (a ``TorchDispatchMode``
count) and the matrix products' share of the operators' time (``torch.profiler``); and what one
thread of this CPU reaches on the update's largest product and on a 1024 x 1024 one (float32).
That says whether the update is bound by arithmetic or by the number of operators it runs. Its
last line is the ceiling of this update on this thread: the matrix products alone at the largest
product's rate, plus the rollout as measured, as env steps/s; no fusing or compiling of the update
can train faster than that without computing less per env step.

``train`` and ``onpolicy`` take ``--device cuda`` (or ``auto``) to run the learner on a GPU. A
MAPPO/IPPO run on the vector engine with many copies then steps its env on the GPU too and keeps
the observations there (``learners.training.observation_device``), as a service run does;
``onpolicy --env-device host`` or ``device`` forces either side at any number of copies, to find
where one overtakes the other. Every other env steps on the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learners.enums import EnvSuite  # noqa: E402
from learners.envs.base import EnvInfo, VecEnv, observation_ops  # noqa: E402
from learners.envs.catalogue import MPE_ENVS  # noqa: E402
from learners.envs.factory import make_vec_env  # noqa: E402
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
    from learners.envs import factory
    from learners.hooks import MemoryHooks
    from learners.training import train

    if args.env_workers is not None:  # override the default stepping rule for this run
        workers = args.env_workers
        factory.default_workers = lambda num_envs, cpus=None: workers

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
    from learners.enums import Backend, Device

    device = resolve_device(Backend(args.backend), Device(args.device))
    print(
        f"{args.env}, {args.num_envs} envs, {args.rollouts} rollouts per figure, device {device}, "
        f"engines {', '.join(args.engines)}"
    )
    for algorithm in args.algorithms:
        # One env and learner per engine, their rounds interleaved: a busy machine slows all alike.
        runs = [_OnPolicyRun(args, algorithm, engine, device) for engine in args.engines]
        for rollout in range(args.rollouts + 1):
            for run in runs:
                run.round(record=rollout > 0)  # the first round warms up
        for run in runs:
            run.report(runs[0])
            if args.flops:
                run.report_flops()
            run.env.close()
    if args.flops:
        peak = _matmul_gflops(1024, 1024, 1024)
        print(f"one thread, float32 1024x1024 matrix product: {peak:.1f} GFLOP/s")


def _counting_kernels() -> Any:
    """A ``TorchDispatchMode`` that counts the operators dispatched to kernels while it is on
    (composite ones counted as the kernels they run), in its ``calls``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountKernels(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.calls += 1
            return func(*args, **(kwargs or {}))

    return CountKernels()


_PRODUCTS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})


def _matmul_gflops(m: int, k: int, n: int, seconds: float = 1.0) -> float:
    """What ``torch.mm`` of (m, k) by (k, n) float32 reaches on this process's threads."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        torch.mm(a, b)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        calls += 1
    return 2.0 * m * k * n * calls / (time.perf_counter() - start) / 1e9


def _env_device(args: argparse.Namespace, algorithm: str, engine: str, device: str) -> str | None:
    """Where the on-policy benchmark steps its env: where a run of the same spec would
    (``learners.training.observation_device``), or forced (a GPU learner's vector engine only)."""
    from benchmarks.learning import default_spec
    from learners.training import observation_device

    if args.env_device == "host":
        return None
    if args.env_device == "device":
        on_gpu = engine == "vector" and args.backend == "torch" and device.startswith("cuda")
        return device if on_gpu else None
    spec = default_spec(
        algorithm, args.backend, args.env, seed=0, steps=1, num_envs=args.num_envs, engine=engine
    )
    return observation_device(spec, device)


class _OnPolicyRun:
    """One algorithm on one engine: rounds of bare stepping, a rollout and an update."""

    def __init__(self, args: argparse.Namespace, algorithm: str, engine: str, device: str) -> None:
        from learners.buffers.rollout import RolloutBuffer
        from learners.registry import entry

        spec = EnvSpec(suite=suite_of(args.env), id=args.env, num_envs=args.num_envs, engine=engine)
        self.name, self.engine = f"{algorithm}/{args.backend}", engine
        self.env = make_vec_env(spec, seed=0, device=_env_device(args, algorithm, engine, device))
        rng = np.random.default_rng(0)
        self.actions = [random_actions(self.env.info, rng) for _ in range(64)]
        algo = entry(algorithm)
        self.config = algo.config.resolve(spec.suite, spec.id, {})
        self.learner = algo.learner_class(args.backend)(self.config, self.env.info, device, 0)
        hidden = self.config.rnn_hidden_size if self.config.recurrent else None
        self.buffer = RolloutBuffer(
            self.env.info, self.config.rollout_length, hidden, observation_ops(self.env)
        )
        self.steps = self.config.rollout_length * self.env.info.num_envs
        self.obs, self.memory = self.env.reset(), self.learner.initial_memory(args.num_envs)
        self.bare: list[float] = []
        self.acting: list[float] = []
        self.training: list[float] = []
        self.updating: list[float] = []

    def round(self, record: bool) -> None:
        from learners.runners.on_policy import collect_rollout

        start = time.perf_counter()
        for k in range(self.config.rollout_length):
            self.env.step(self.actions[k % 64])
        middle = time.perf_counter()
        self.buffer.reset()
        self.obs, self.memory = collect_rollout(
            self.env, self.learner, self.buffer, self.obs, self.memory
        )
        collected = time.perf_counter()
        self.learner.update(self.buffer)
        end = time.perf_counter()
        if record:
            self.bare.append(self.steps / (middle - start))
            self.acting.append(self.steps / (collected - middle))
            self.training.append(self.steps / (end - middle))
            self.updating.append(end - collected)

    def report(self, first: _OnPolicyRun) -> None:
        b, a, t = (statistics.median(x) for x in (self.bare, self.acting, self.training))
        versus = ""
        if first is not self:
            versus = f"  ({t / statistics.median(first.training):.1f}x {first.engine}'s training)"
        print(
            f"  {self.name} on {self.engine:>6}: bare env {b:8.0f}  rollout only {a:7.0f} "
            f"({a / b:4.0%})  training {t:7.0f} env steps/s ({t / b:4.0%} of the bare env)" + versus
        )

    def report_flops(self) -> None:
        """The update's matrix-product operations per env step, the rate they make, the
        operators it dispatches and the share of its time in matrix products."""
        from torch.profiler import ProfilerActivity, profile
        from torch.utils.flop_counter import FlopCounterMode

        kernels = _counting_kernels()
        with FlopCounterMode(display=False) as counter, kernels:
            self.learner.update(self.buffer)  # one more update, on the last rollout, counted
        flops = counter.get_total_flops()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            self.learner.update(self.buffer)
        ops = [e for e in prof.key_averages() if e.key.startswith("aten::")]
        total = sum(e.self_cpu_time_total for e in ops)
        products = sum(e.self_cpu_time_total for e in ops if e.key in _PRODUCTS)
        seconds = statistics.median(self.updating)
        share = seconds / (self.steps / statistics.median(self.training))
        print(
            f"    update: {seconds * 1e3:.1f} ms per rollout ({share:.0%} of training time);"
            f" matrix products {flops / self.steps / 1e6:.2f} MFLOP per env step,"
            f" {flops / seconds / 1e9:.1f} GFLOP/s over the whole update"
        )
        steps = self.config.epochs * self.config.minibatches
        print(
            f"    {kernels.calls} operators dispatched ({kernels.calls / steps:.0f} per gradient"
            f" step); matrix products {products / total:.0%} of the operators' time (profiled)"
        )
        rows = self.steps * self.env.info.num_agents // self.config.minibatches
        width = max(self.config.hidden_sizes)
        peak = _matmul_gflops(rows, width, width)
        print(
            f"    one thread, the update's largest product ({rows}x{width} by {width}x{width}):"
            f" {peak:.1f} GFLOP/s"
        )
        # The fastest this update could train on this thread: its matrix products at the rate of
        # its largest one (its smaller ones run slower) and nothing else in the update, plus the
        # rollout as measured. A fused or compiled update can approach it, not pass it.
        products_us = flops / self.steps / (peak * 1e9) * 1e6
        rollout_us = 1e6 / statistics.median(self.acting)
        print(
            f"    ceiling: the products alone at that rate take {products_us:.1f} us per env step"
            f" and the rollout {rollout_us:.1f} us: at most"
            f" {1e6 / (products_us + rollout_us):,.0f} env steps/s with this update"
            f" (measured {statistics.median(self.training):,.0f})"
        )


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
    on.add_argument(
        "--engines", nargs="+", choices=["mpe2", "vector"], default=["mpe2"],
        help="mpe engines to compare side by side (env.engine)",
    )  # fmt: skip
    on.add_argument(
        "--env-device", choices=["auto", "host", "device"], default="auto",
        help="a GPU learner's vector engine: as a run places it, on the host, or on the device",
    )  # fmt: skip
    on.add_argument(
        "--flops", action="store_true",
        help="count the update's floating-point operations (torch) and compare with a matmul",
    )  # fmt: skip
    args = parser.parse_args()
    commands = {"envs": bench_envs, "train": bench_train, "onpolicy": bench_on_policy}
    commands[args.command](args)


if __name__ == "__main__":
    main()
