"""One device policy for every backend (``learners.backends.resolve_device``): ``cpu`` is the CPU,
``auto`` is the GPU where the framework sees one, ``cuda`` without one is refused with the
backend's own reason, never run on the CPU instead. And the thread settings' refusals."""

from __future__ import annotations

import pytest

from learners.backends import DeviceUnavailable, resolve_device, runtime, threads_setting
from learners.enums import Backend, Device

REASONS = {
    Backend.TORCH: "no CUDA GPU visible to PyTorch",
    Backend.TENSORFLOW: "TensorFlow on this worker sees no GPU",
    Backend.MINDSPORE: "the MindSpore backend runs on the CPU",
}


@pytest.mark.parametrize("backend", list(Backend))
def test_every_backend_follows_the_same_device_policy(backend: Backend) -> None:
    module = runtime(backend)
    assert resolve_device(backend, Device.CPU) == "cpu"
    if module.has_gpu():
        assert resolve_device(backend, Device.AUTO) == "cuda"
        assert resolve_device(backend, Device.CUDA) == "cuda"
        return
    assert resolve_device(backend, "auto") == "cpu"
    with pytest.raises(DeviceUnavailable) as refused:
        resolve_device(backend, "cuda")
    message = str(refused.value)
    assert message.startswith("the spec asks for device 'cuda' but ")
    assert REASONS[backend] in message and "use 'auto' or 'cpu'" in message


@pytest.mark.parametrize("raw", ["0", "-2", "two", "1.5", ""])
def test_a_thread_setting_that_is_not_a_positive_integer_is_refused_by_name(raw: str) -> None:
    with pytest.raises(ValueError, match=r"^MARLFORGE_X must be a positive integer, got "):
        threads_setting("MARLFORGE_X", raw)


def test_a_thread_setting_reads_a_positive_integer() -> None:
    assert threads_setting("MARLFORGE_X", "3") == 3
    assert threads_setting("MARLFORGE_X", " 2 ") == 2
