"""Acting with a checkpoint's policy in the API process (``POST .../checkpoints/{cid}/act``).

A policy is loaded once from the stored checkpoint (fetched into this host's cache, checked
against its sha256, only the acting network's tensors read, the copy deleted) and kept in a cache
bounded by the bytes of its arrays (``MARLFORGE_INFERENCE_CACHE_MB``), least recently used out
first. It runs on NumPy (``learners.exports.NumpyPolicy``): the API imports no deep-learning
framework. A request is bounded: at most ``MAX_BATCH`` observations per agent, and a body of at
most ``api.security.MAX_ACT_BODY_BYTES``."""

from __future__ import annotations

import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from api.errors import ApiError, FieldProblem
from core.models import Checkpoint
from core.storage import ArtifactStore, ObjectCorrupt, ObjectMissing, StoreError, verified_copy
from learners.api import CheckpointError, EnvInputError, NumpyPolicy

MAX_BATCH = 1024
"""Observations per agent in one request."""
MAX_PARALLEL_LOADS = 2
"""Policies loaded at once per API process: each holds a copy of its whole checkpoint meanwhile."""


def _invalid(field: str, reason: str) -> ApiError:
    return ApiError(
        422, "invalid_request", f"{field}: {reason}", [FieldProblem(field=field, reason=reason)]
    )


class PolicyCache:
    """The policies one API process keeps loaded, by checkpoint."""

    def __init__(self, storage: ArtifactStore, max_bytes: int) -> None:
        self.storage = storage
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._loads = threading.BoundedSemaphore(MAX_PARALLEL_LOADS)
        self._policies: OrderedDict[str, NumpyPolicy] = OrderedDict()
        self._bytes = 0

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def cached(self) -> list[str]:
        """The checkpoint ids held, least recently used first."""
        with self._lock:
            return [key.split(":", 1)[0] for key in self._policies]

    def _take(self, key: str) -> NumpyPolicy | None:
        with self._lock:
            policy = self._policies.get(key)
            if policy is not None:
                self._policies.move_to_end(key)
            return policy

    def get(self, checkpoint: Checkpoint) -> NumpyPolicy:
        """The policy of ``checkpoint``; an ``ApiError`` saying why there is none."""
        key = f"{checkpoint.id}:{checkpoint.sha256}"
        policy = self._take(key)
        if policy is not None:
            return policy
        with self._loads:
            policy = self._take(key)  # loaded by another request meanwhile
            if policy is None:
                policy = self._load(checkpoint)
                self._keep(key, policy)
        return policy

    def _keep(self, key: str, policy: NumpyPolicy) -> None:
        if policy.nbytes > self.max_bytes:
            return  # served, not kept: it alone would fill the cache
        with self._lock:
            self._policies[key] = policy
            self._bytes += policy.nbytes
            while self._bytes > self.max_bytes:
                _, dropped = self._policies.popitem(last=False)
                self._bytes -= dropped.nbytes

    def _load(self, checkpoint: Checkpoint) -> NumpyPolicy:
        work = self.storage.cache_dir / "inference"
        work.mkdir(parents=True, exist_ok=True)
        source = work / f"{uuid.uuid4().hex}.ckpt"
        what = f"checkpoint {checkpoint.id}"
        try:
            verified_copy(self.storage, checkpoint.path, checkpoint.sha256, source)
            return NumpyPolicy.load(source)
        except ObjectMissing:
            raise ApiError(
                404, "file_missing", f"the file of {what} is missing from the artifact storage"
            ) from None
        except ObjectCorrupt:
            raise ApiError(
                410, "file_corrupt", f"the file of {what} does not match its recorded sha256"
            ) from None
        except StoreError as exc:
            raise ApiError(
                503, "storage_unavailable", f"the artifact storage cannot be read: {exc}"
            ) from None
        except CheckpointError as exc:
            raise ApiError(
                409, "policy_unavailable", f"{what} holds no usable policy: {exc}"
            ) from None
        finally:
            source.unlink(missing_ok=True)


def _batch_size(value: Any) -> int:
    """The leading length of a nested list (0 for a number)."""
    return len(value) if isinstance(value, list) else 0


def act(policy: NumpyPolicy, body: Any) -> dict[str, Any]:
    """Run ``policy`` on a request body: ``observations`` (a dict of per-agent observations, or
    an array), optional ``action_masks`` (per agent) and ``memory`` (recurrent policies).
    Returns the answer's JSON; a 422 naming the field for anything that does not fit."""
    if not isinstance(body, Mapping):
        raise _invalid("body", "must be a JSON object")
    unknown = sorted(set(body) - {"observations", "action_masks", "memory"})
    if unknown:
        raise _invalid(
            unknown[0], "not a field of this request (observations, action_masks, memory)"
        )
    if "observations" not in body:
        raise _invalid("observations", "required")
    observations, masks, memory = body["observations"], body.get("action_masks"), body.get("memory")
    if isinstance(observations, Mapping):
        for agent, value in observations.items():
            rows = value.get("observation") if isinstance(value, Mapping) else value
            if (
                isinstance(rows, list)
                and rows
                and isinstance(rows[0], list)
                and len(rows) > MAX_BATCH
            ):
                raise _invalid(f"observations.{agent}", f"more than {MAX_BATCH} observations")
    elif isinstance(observations, list):
        if _batch_size(observations) > MAX_BATCH:
            raise _invalid("observations", f"more than {MAX_BATCH} observations")
    else:
        raise _invalid("observations", "must be an object of per-agent observations or an array")
    if masks is not None and not isinstance(masks, Mapping):
        raise _invalid("action_masks", "must be an object of per-agent masks")
    state = None
    if memory is not None:
        try:
            state = np.asarray(memory, np.float32)
        except (ValueError, TypeError):
            raise _invalid("memory", "not an array of numbers of one shape") from None
    try:
        actions, after = policy.act(observations, masks, state)
    except EnvInputError as exc:
        raise _invalid(_field_of(str(exc)), str(exc)) from None
    if policy.memory_size is not None and after is None:
        raise AssertionError("a recurrent policy returned no memory")
    return {
        "actions": _plain(actions),
        "memory": None if after is None else after.tolist(),
    }


def _field_of(message: str) -> str:
    """The request field an ``EnvInputError`` is about (``observations.<agent>``...)."""
    if message.startswith(("memory", "this policy")):
        return "memory"
    field = "action_masks" if "action mask" in message else "observations"
    agent = re.match(r"agent (\S+): ", message)
    return f"{field}.{agent.group(1)}" if agent else field


def _plain(actions: Any) -> Any:
    """Actions as JSON values: per-agent dicts kept, arrays as lists, NumPy scalars as numbers."""
    if isinstance(actions, Mapping):
        return {agent: _plain(value) for agent, value in actions.items()}
    if isinstance(actions, np.ndarray):
        return actions.tolist()
    if isinstance(actions, np.generic):
        return actions.item()
    return actions
