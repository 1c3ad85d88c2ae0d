"""What leaves the service: files made from a run's checkpoints for use elsewhere.

``policy_file``: the policy-only export, the acting network's tensors alone with the checkpoint's
manifest (``contents: policy``), which ``learners.policy.load_policy`` loads like a checkpoint.
NumPy and safetensors only: the API exports without a deep-learning framework.
"""

from learners.exports.policy_file import PolicyExport, export_policy, policy_tensor_names

__all__ = ["PolicyExport", "export_policy", "policy_tensor_names"]
