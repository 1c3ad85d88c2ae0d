"""What leaves the service: files made from a run's checkpoints for use elsewhere.

``policy_file``: the policy-only export, the acting network's tensors alone with the checkpoint's
manifest (``contents: policy``), which ``learners.policy.load_policy`` loads like a checkpoint.
NumPy and safetensors only: the API exports without a deep-learning framework.
``env_io``: a policy fed what an env returns (PettingZoo dicts, arrays, batches, action masks) and
answering in the env's own action space (``Policy.act``).
"""

from learners.exports.env_io import EnvInputError
from learners.exports.policy_file import PolicyExport, export_policy, policy_tensor_names

__all__ = ["EnvInputError", "PolicyExport", "export_policy", "policy_tensor_names"]
