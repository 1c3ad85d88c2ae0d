"""What leaves the service: files made from a run's checkpoints for use elsewhere.

``policy_file``: the policy-only export, the acting network's tensors alone with the checkpoint's
manifest (``contents: policy``), which ``learners.policy.load_policy`` loads like a checkpoint.
NumPy and safetensors only: the API exports without a deep-learning framework.
``layout``: the acting network written out as data (the export manifest's ``network``), enough
to rebuild the policy with NumPy alone. ``onnx_graph``: the policy as an ONNX model compiled from
that layout with ONNX's own helpers (``export_onnx``). ``numpy_policy``: the policy run by NumPy
from that layout (``NumpyPolicy``), what the API's inference route acts with.
``env_io``: a policy fed what an env returns (PettingZoo dicts, arrays, batches, action masks) and
answering in the env's own action space (``Policy.act``).
"""

from learners.exports.env_io import EnvInputError
from learners.exports.layout import network_layout
from learners.exports.numpy_policy import NumpyPolicy
from learners.exports.onnx_graph import OnnxExport, export_onnx
from learners.exports.policy_file import PolicyExport, export_policy, policy_tensor_names

__all__ = [
    "EnvInputError",
    "NumpyPolicy",
    "OnnxExport",
    "PolicyExport",
    "export_onnx",
    "export_policy",
    "network_layout",
    "policy_tensor_names",
]
