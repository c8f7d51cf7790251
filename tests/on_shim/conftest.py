"""Fixtures of the tests that run on f4pipe's HIP shim (started by tests/test_hipshim.py)."""

from __future__ import annotations

import pytest

from f4pipe.devices.hipdevice import HipDevice
from f4pipe.hipshim.backend import ShimBackend, attached_backend


@pytest.fixture(scope="session")
def device():
    """HipDevice on the shim, through the installed hip-python; every test leaves it with no
    allocation, module or event alive."""
    dev = HipDevice.open()
    yield dev
    dev.close()


@pytest.fixture
def shim(device) -> ShimBackend:
    """The shim's Python half, with an empty call log; checks nothing leaked afterwards."""
    backend = attached_backend()
    backend.clear_call_log()
    yield backend
    device.close()
    assert backend.live_allocations() == 0
    assert backend.live_handles() == 0
