"""The PyTorch backend: learners, networks, ops and runtime (imported only when a run uses
torch)."""
