"""A checkpoint's policy as an ONNX model, compiled from its layout (``learners.exports.layout``)
and its tensors with ONNX's own helpers: no deep-learning framework, so the checkpoint of any
backend exports the same graph.

The model's inputs: ``obs`` (batch, N, obs_dim) float32, padded as the layout says; for discrete
actions ``action_mask`` (batch, N, actions) float32, 1 where an action is available; for a
recurrent policy ``memory`` (batch, N, H) float32, zeros at an episode's start. Its outputs:
``actions``, (batch, N) int64 indices or (batch, N, actions) float32 in [-1, 1]; for discrete
actions ``scores`` too, the network's outputs with the unavailable actions' set to the masked
value (logits, or Weighted QMIX's utilities); for continuous actions ``env_actions`` too, mapped
onto the env's bounds (an agent's first ``sizes[i]`` entries are its action); for a recurrent
policy ``memory_out``, the state to feed back at the next step. The manifest rides along as the
model's metadata (``marlforge``: the JSON manifest)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import safetensors
from numpy.typing import NDArray
from onnx import TensorProto, helper, numpy_helper

from learners.checkpoint import CheckpointError, read_manifest
from learners.exports.layout import layout_tensors, network_layout

OPSET = 17
"""The ONNX operator set the graph uses (onnxruntime runs it from release 1.12 on)."""
IR_VERSION = 8
MANIFEST_KEY = "marlforge"


@dataclass(frozen=True)
class OnnxExport:
    """What ``export_onnx`` wrote."""

    path: Path
    tensors: list[str]
    """The checkpoint's tensors the graph holds as constants, sorted."""
    bytes: int
    source_bytes: int
    inputs: list[str]
    outputs: list[str]


class _Graph:
    """The nodes and constants of one graph, with fresh names."""

    def __init__(self, tensors: Mapping[str, NDArray[Any]]) -> None:
        self.tensors = tensors
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._constants: dict[tuple[str, int | None, bool], str] = {}
        self._count = 0

    def fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def node(self, op: str, inputs: list[str], stem: str | None = None, **attrs: Any) -> str:
        out = self.fresh(stem or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def constant(self, value: NDArray[Any], stem: str = "const") -> str:
        name = self.fresh(stem)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def tensor(self, name: str, row: int | None, transpose: bool = False) -> str:
        """The checkpoint tensor ``name`` (its leading ``row`` when given) as a constant, once."""
        key = (name, row, transpose)
        if key not in self._constants:
            if name not in self.tensors:
                raise CheckpointError(f"the policy has no tensor {name}")
            value = np.asarray(self.tensors[name], np.float32)
            if row is not None:
                value = value[row]
            if transpose:
                value = value.T
            self._constants[key] = self.constant(np.ascontiguousarray(value), "w")
        return self._constants[key]

    def linear(self, x: str, step: Mapping[str, Any]) -> str:
        row = step.get("row")
        weight = self.tensor(step["weight"], row, transpose=True)
        bias = self.tensor(step["bias"], row)
        return self.node("Add", [self.node("MatMul", [x, weight]), bias])


def _agent_rows(graph: _Graph, source: str, index: int) -> str:
    """Row ``index`` of the agent axis of ``source`` (batch, N, F): (batch, F)."""
    return graph.node("Gather", [source, graph.constant(np.array(index, np.int64))], axis=1)


def _stack(graph: _Graph, parts: list[str]) -> str:
    """(batch, F) parts -> (batch, N, F)."""
    axis = graph.constant(np.array([1], np.int64))
    return graph.node("Concat", [graph.node("Unsqueeze", [p, axis]) for p in parts], axis=1)


def _one_hot(graph: _Graph, x: str, batch: str, index: int, width: int) -> str:
    row = np.zeros((1, width), np.float32)
    row[0, index] = 1.0
    shape = graph.node("Concat", [batch, graph.constant(np.array([width], np.int64))], axis=0)
    ids = graph.node("Expand", [graph.constant(row, "one_hot"), shape])
    return graph.node("Concat", [x, ids], axis=-1)


def _gru(graph: _Graph, x: str, h: str, step: Mapping[str, Any]) -> str:
    """PyTorch's GRU cell equations (the layout's ``gru`` step)."""
    size = int(step["size"])
    splits = graph.constant(np.array([size, size, size], np.int64))
    x_gates, h_gates = graph.linear(x, step["input"]), graph.linear(h, step["hidden"])
    x_r, x_z, x_n = (graph.fresh("x_gate") for _ in range(3))
    h_r, h_z, h_n = (graph.fresh("h_gate") for _ in range(3))
    graph.nodes.append(helper.make_node("Split", [x_gates, splits], [x_r, x_z, x_n], axis=-1))
    graph.nodes.append(helper.make_node("Split", [h_gates, splits], [h_r, h_z, h_n], axis=-1))
    r = graph.node("Sigmoid", [graph.node("Add", [x_r, h_r])])
    z = graph.node("Sigmoid", [graph.node("Add", [x_z, h_z])])
    n = graph.node("Tanh", [graph.node("Add", [x_n, graph.node("Mul", [r, h_n])])])
    keep = graph.node("Sub", [graph.constant(np.array(1.0, np.float32)), z])
    return graph.node("Add", [graph.node("Mul", [keep, n]), graph.node("Mul", [z, h])])


def build_model(
    layout: Mapping[str, Any], tensors: Mapping[str, NDArray[Any]], metadata: str | None = None
) -> onnx.ModelProto:
    """The ONNX model of ``layout`` with ``tensors``' values (checked by ONNX's checker)."""
    graph = _Graph(tensors)
    n, width = layout["input"]["shape"][1], layout["input"]["shape"][2]
    output = layout["output"]
    discrete = output["kind"] == "discrete"
    actions = int(output["actions"])
    memory = layout.get("memory")
    inputs = [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", n, width])]
    if discrete:
        inputs.append(
            helper.make_tensor_value_info("action_mask", TensorProto.FLOAT, ["batch", n, actions])
        )
    if memory:
        size = memory["shape"][2]
        inputs.append(
            helper.make_tensor_value_info("memory", TensorProto.FLOAT, ["batch", n, size])
        )
    batch = graph.node(
        "Slice",
        [
            graph.node("Shape", ["obs"]),
            graph.constant(np.array([0], np.int64)),
            graph.constant(np.array([1], np.int64)),
        ],
        "batch",
    )
    results, states = [], []
    for agent in layout["agents"]:
        i = int(agent["index"])
        x = _agent_rows(graph, "obs", i)
        for step in agent["steps"]:
            op = step["op"]
            if op == "one_hot":
                x = _one_hot(graph, x, batch, int(step["index"]), int(step["width"]))
            elif op == "linear":
                x = graph.linear(x, step)
            elif op == "relu":
                x = graph.node("Relu", [x])
            elif op == "tanh":
                x = graph.node("Tanh", [x])
            elif op == "gru":
                x = _gru(graph, x, _agent_rows(graph, "memory", i), step)
                states.append(x)
            else:
                raise CheckpointError(f"the layout has an unknown step {op!r}")
        results.append(x)
    out = _stack(graph, results)
    outputs = []
    if discrete:
        own = np.zeros((n, actions), np.float32)
        for j, size in enumerate(output["sizes"]):
            own[j, :size] = 1.0
        mask = graph.node("Mul", ["action_mask", graph.constant(own, "own_actions")])
        available = graph.node("Greater", [mask, graph.constant(np.array(0.5, np.float32))])
        masked_value = graph.constant(np.array(output["masked_value"], np.float32))
        graph.nodes.append(helper.make_node("Where", [available, out, masked_value], ["scores"]))
        graph.nodes.append(helper.make_node("ArgMax", ["scores"], ["actions"], axis=-1, keepdims=0))
        outputs.append(helper.make_tensor_value_info("actions", TensorProto.INT64, ["batch", n]))
        outputs.append(
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", n, actions])
        )
    else:
        minus, plus = np.array(-1.0, np.float32), np.array(1.0, np.float32)
        graph.nodes.append(
            helper.make_node(
                "Clip", [out, graph.constant(minus), graph.constant(plus)], ["actions"]
            )
        )
        low, high = np.asarray(output["low"], np.float32), np.asarray(output["high"], np.float32)
        half = 0.5 * (high - low)
        scaled = graph.node("Mul", ["actions", graph.constant(half, "half_range")])
        graph.nodes.append(
            helper.make_node("Add", [scaled, graph.constant(low + half, "middle")], ["env_actions"])
        )
        for name in ("actions", "env_actions"):
            outputs.append(
                helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", n, actions])
            )
    if memory:
        graph.nodes.append(helper.make_node("Identity", [_stack(graph, states)], ["memory_out"]))
        outputs.append(
            helper.make_tensor_value_info(
                "memory_out", TensorProto.FLOAT, ["batch", n, memory["shape"][2]]
            )
        )
    model = helper.make_model(
        helper.make_graph(graph.nodes, "marlforge_policy", inputs, outputs, graph.initializers),
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="marlforge",
        ir_version=IR_VERSION,
    )
    if metadata is not None:
        helper.set_model_props(model, {MANIFEST_KEY: metadata})
    onnx.checker.check_model(model, full_check=True)
    return model


def export_onnx(source: Path | str, target: Path | str) -> OnnxExport:
    """Write the ONNX model of the policy in the checkpoint (or policy-only export) at ``source``
    to ``target``, whole or not at all (a temporary file beside it, then a rename). The model's
    metadata carries the manifest with ``contents: policy`` and the layout as ``network``."""
    source, target = Path(source), Path(target)
    manifest = read_manifest(source)
    layout = network_layout(manifest)
    with safetensors.safe_open(str(source), framework="np") as handle:
        present = set(handle.keys())
        missing = sorted(layout_tensors(layout) - present)
        if missing:
            raise CheckpointError(f"{source} lacks the policy tensors {missing}")
        tensors = {name: handle.get_tensor(name) for name in layout_tensors(layout)}
    exported = manifest.model_copy(
        update={"contents": "policy", "resumable_on": [], "runner": {}, "network": layout}
    )
    model = build_model(layout, tensors, exported.model_dump_json())
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        partial.write_bytes(model.SerializeToString())
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return OnnxExport(
        target,
        sorted(tensors),
        target.stat().st_size,
        source.stat().st_size,
        [i.name for i in model.graph.input],
        [o.name for o in model.graph.output],
    )
