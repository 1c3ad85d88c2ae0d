"""Environment adapters: every suite as a batched ``VecEnv`` (see ``base.py``)."""
