"""The vectorised MPE engine: mpe2's scenarios as NumPy array code over a batch of copies.

See ``engine.VectorMPE`` for the interface and tests/learners/envs/test_vector_mpe.py for how it is
held equal to mpe2.
"""

from learners.envs.vector.engine import SCENARIOS, VectorMPE, build_scenario
from learners.envs.vector.world import WorldState

__all__ = ["SCENARIOS", "VectorMPE", "WorldState", "build_scenario"]
