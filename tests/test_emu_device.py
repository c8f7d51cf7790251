"""EmulatorDevice as an f4pipe.core.device.Device: buffers, loading, launch state, refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from f4pipe.aiter.manifest import read_manifest
from f4pipe.core.device import Device
from f4pipe.core.errors import EmulatorError
from f4pipe.emu import EmulatorDevice


def test_is_a_device_with_the_emulator_identity() -> None:
    dev = EmulatorDevice()
    assert isinstance(dev, Device)
    assert (dev.device_id, dev.arch, dev.can_time, dev.num_cu) == ("emulator", "gfx950", False, 256)


def test_buffers_upload_download_memset_free() -> None:
    dev = EmulatorDevice()
    a, b = dev.alloc(10), dev.alloc(4096)
    assert a.addr != 0 and b.addr >= a.addr + 10
    dev.upload(a, np.arange(10, dtype=np.uint8))
    dev.memset(b, 0xAB, 100)
    assert list(dev.download(a)) == list(range(10))
    assert list(dev.download(a, 3)) == [0, 1, 2]
    got = dev.download(b)
    assert (got[:100] == 0xAB).all() and (got[100:] == 0).all()
    with pytest.raises(EmulatorError, match="upload of 11 bytes into a 10-byte buffer"):
        dev.upload(a, np.zeros(11, dtype=np.uint8))
    dev.free(a)
    with pytest.raises(EmulatorError, match="not allocated on this emulator"):
        dev.download(a)
    dev.close()
    with pytest.raises(EmulatorError, match="not allocated"):
        dev.free(b)


def test_load_reads_entry_and_settings_from_the_descriptor(f4gemm_dir: Path) -> None:
    dev = EmulatorDevice()
    for entry in read_manifest(f4gemm_dir):
        kernel = dev.load(f4gemm_dir / entry.co_name, entry.symbol)
        prog = kernel.program
        assert prog.entry == prog.text_addr  # the kernel starts .text
        assert prog.lds_bytes == 163840
        assert prog.kernarg_sgpr == 0 and prog.workgroup_id_sgprs == {0: 2, 1: 3, 2: 4}
        assert prog.flush_f32_denorms
        assert prog.kernarg_bytes == (384 if entry.bpreshuffle else 368)
    with pytest.raises(EmulatorError, match="no kernel 'nope'"):
        dev.load(f4gemm_dir / entry.co_name, "nope")


def test_launch_refuses_partial_waves(f4gemm_dir: Path) -> None:
    entry = read_manifest(f4gemm_dir).entries[0]
    dev = EmulatorDevice()
    kernel = dev.load(f4gemm_dir / entry.co_name, entry.symbol)
    with pytest.raises(EmulatorError, match="partial waves"):
        dev.launch(kernel, (1, 1, 1), (100, 1, 1), bytes(372))
