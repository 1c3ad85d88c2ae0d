"""MindSpore's eager (PyNative) mode against its compiled graphs, and training speed per backend.

    python benchmarks/mindspore_compile.py adam --repeats 5
    python benchmarks/mindspore_compile.py learners --algorithms mappo ippo --steps 6000
    python benchmarks/mindspore_compile.py learners --algorithms wqmix --set recurrent=true

``adam`` times one gradient step of a small MLP (forward, backward, the backend's torch-exact Adam):
MindSpore eager, MindSpore compiled (``mindspore.jit``) and PyTorch, in milliseconds per step.

``learners`` trains each algorithm with its defaults on its default environment (MPE's
simple_spread_v3 for the multi-agent algorithms, Pendulum-v1 for DDPG) in every backend it is built
for, and prints the steady training rate in env steps per second (the median of the reported
windows after the first, which holds the graphs' compilation; evaluation is left out, as in
``perf/steps_per_second``), the first window's rate, and the ratio to PyTorch. ``--set key=value``
overrides a hyperparameter of every run (JSON values, as in ``benchmarks/learning.py``).
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

from benchmarks.learning import default_spec, parse_overrides  # noqa: E402
from learners.enums import Algorithm, Backend  # noqa: E402
from learners.hooks import MemoryHooks  # noqa: E402
from learners.registry import entry  # noqa: E402
from learners.training import train  # noqa: E402

DEFAULT_ENVS = {
    Algorithm.DDPG: "Pendulum-v1",
    Algorithm.MAPPO: "simple_spread_v3",
    Algorithm.IPPO: "simple_spread_v3",
    Algorithm.MADDPG: "simple_spread_v3",
    Algorithm.WQMIX: "simple_spread_v3",
}


def _median_ms(step: Any, repeats: int, calls: int) -> float:
    for _ in range(3):  # warm up (and compile)
        step()
    figures = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        figures.append((time.perf_counter() - start) * 1000.0 / calls)
    return statistics.median(figures)


def _mindspore_adam_steps(x: np.ndarray, y: np.ndarray, sizes: list[int]) -> tuple[Any, Any]:
    """An eager and a compiled Adam step of the same MLP (separate copies)."""
    import mindspore as ms
    from mindspore import nn, ops

    from learners.backends.mindspore.networks import MLP, named_parameters
    from learners.backends.mindspore.optim import TorchAdam, flatten

    class Loss(nn.Cell):
        def __init__(self, net: nn.Cell) -> None:
            super().__init__()
            self.net = net

        def construct(self, x: Any, y: Any) -> Any:
            return ops.mean((self.net(x) - y) ** 2)

    class Step(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            net = MLP(sizes[0], sizes[1:-1], sizes[-1], np.random.default_rng(0))
            named = named_parameters(net)
            self.adam = TorchAdam([p for _, p in named], [n for n, _ in named], 1e-3)
            self.grad = ms.value_and_grad(Loss(net), None, self.adam.params)

        def construct(self, x: Any, y: Any, hyper: Any) -> Any:
            loss, grads = self.grad(x, y)
            self.adam(flatten(grads), hyper)
            return loss

    eager, compiled = Step(), Step()
    jitted = ms.jit(compiled)
    tx, ty = ms.Tensor(x), ms.Tensor(y)
    return (
        lambda: eager(tx, ty, eager.adam.next_hyper()).asnumpy(),
        lambda: jitted(tx, ty, compiled.adam.next_hyper()).asnumpy(),
    )


def _torch_adam_step(x: np.ndarray, y: np.ndarray, sizes: list[int]) -> Any:
    import torch

    from learners.backends.torch.networks import MLP

    torch.set_num_threads(1)
    net = MLP(sizes[0], sizes[1:-1], sizes[-1])
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    tx, ty = torch.as_tensor(x), torch.as_tensor(y)

    def step() -> float:
        opt.zero_grad()
        loss = ((net(tx) - ty) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def bench_adam(args: argparse.Namespace) -> None:
    sizes = [args.inputs, *args.hidden, args.outputs]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, sizes[0])).astype(np.float32)
    y = rng.normal(size=(args.batch, sizes[-1])).astype(np.float32)
    eager, compiled = _mindspore_adam_steps(x, y, sizes)
    print(f"one Adam step of an MLP {sizes}, batch {args.batch} (median of {args.repeats} runs)")
    figures = {
        "mindspore eager (PyNative)": _median_ms(eager, args.repeats, 20),
        "mindspore compiled (jit)": _median_ms(compiled, args.repeats, 100),
        "pytorch": _median_ms(_torch_adam_step(x, y, sizes), args.repeats, 100),
    }
    for name, ms_per_step in figures.items():
        print(f"  {name:>28}: {ms_per_step:8.3f} ms/step")


def training_rates(
    algorithm: Algorithm, backend: Backend, steps: int, overrides: dict[str, Any]
) -> tuple[float, float]:
    """(steady env steps/s, first window's env steps/s) of one training run."""
    spec = default_spec(
        algorithm, backend, DEFAULT_ENVS[algorithm], seed=0, steps=steps, eval_every=steps,
        hyperparameters=overrides,
    )  # fmt: skip
    hooks = MemoryHooks()
    train(spec, hooks)
    rates = [p.value for p in hooks.points if p.name == "perf/steps_per_second"]
    if len(rates) < 2:
        raise SystemExit(f"{steps} steps give {len(rates)} report windows; ask for more steps")
    return statistics.median(rates[1:]), rates[0]


def bench_learners(args: argparse.Namespace) -> None:
    overrides = parse_overrides(args.set)
    changed = f", with {overrides}" if overrides else ""
    print(f"training env steps/s, default configs{changed} and envs, {args.steps} steps per run")
    print(f"  {'algorithm':<8} {'backend':<11} {'steady':>9} {'first':>9} {'vs torch':>9}")
    for name in args.algorithms:
        algorithm = Algorithm(name)
        built = entry(algorithm).backends
        reference: float | None = None
        for backend in (Backend(b) for b in args.backends):
            if backend not in built:
                print(f"  {algorithm.value:<8} {backend.value:<11} {'not built':>9}")
                continue
            steady, first = training_rates(algorithm, backend, args.steps, overrides)
            if backend == Backend.TORCH:
                reference = steady
            ratio = f"{reference / steady:8.2f}x" if reference else f"{'':>9}"
            print(f"  {algorithm.value:<8} {backend.value:<11} {steady:9.0f} {first:9.0f} {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    adam = sub.add_parser("adam", help="eager vs compiled Adam step, and PyTorch's")
    adam.add_argument("--inputs", type=int, default=18)
    adam.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    adam.add_argument("--outputs", type=int, default=5)
    adam.add_argument("--batch", type=int, default=256)
    adam.add_argument("--repeats", type=int, default=5)
    learners = sub.add_parser("learners", help="training env steps/s per algorithm and backend")
    learners.add_argument("--algorithms", nargs="+", default=[a.value for a in DEFAULT_ENVS])
    learners.add_argument("--backends", nargs="+", default=[b.value for b in Backend])
    learners.add_argument("--steps", type=int, default=6000)
    learners.add_argument(
        "--set", nargs="*", default=[], metavar="KEY=VALUE",
        help="override a hyperparameter of every run (JSON value), e.g. recurrent=true",
    )  # fmt: skip
    args = parser.parse_args()
    bench_adam(args) if args.command == "adam" else bench_learners(args)


if __name__ == "__main__":
    main()
