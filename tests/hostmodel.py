"""A host-memory Device whose "kernel" is a numpy model of the f4gemm contract.

It exists to test the host flow (buffers, kernarg, layouts, D handling, verification) without
the emulator or a GPU: launch() reads ONLY bytes at the kernarg's addresses and undoes the
README layouts with f4pipe.core.numerics' inverse maps (themselves proven against the README's
element-wise maps in test_numerics), then writes bf16 D like the kernels do — rounded once
without a split, bf16 atomic adds of per-chunk partials with one. It is not a model of the
instructions; the emulator is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from f4pipe.core.device import DeviceBuffer
from f4pipe.core.errors import DeviceError, InputError
from f4pipe.core.numerics import (
    bf16_bits_to_float,
    dequantize,
    float_to_bf16_bits,
    round_up,
    unshuffle_b,
    unshuffle_scales,
)
from f4pipe.host.kernarg import unpack_kernarg


@dataclass(frozen=True)
class ModelKernel:
    symbol: str
    co_path: Path


class HostModelDevice:
    device_id = "hostmodel"
    arch = "gfx950"
    num_cu = 256
    can_time = False

    def __init__(self, *, honour_b_shuffle: bool = True) -> None:
        self._mem: dict[int, bytearray] = {}
        self._next = 0x7F00_0000_0000
        self.honour_b_shuffle = honour_b_shuffle
        self.launches: list[tuple[tuple[int, int, int], bytes]] = []

    def load(self, co_path: Path, symbol: str) -> ModelKernel:
        if not Path(co_path).is_file():
            raise InputError(f"no code object {co_path}")
        return ModelKernel(symbol=symbol, co_path=Path(co_path))

    def alloc(self, nbytes: int) -> DeviceBuffer:
        addr = self._next
        self._next += round_up(max(nbytes, 1), 1 << 16)
        self._mem[addr] = bytearray(nbytes)
        return DeviceBuffer(addr=addr, nbytes=nbytes)

    def free(self, buf: DeviceBuffer) -> None:
        del self._mem[buf.addr]

    def upload(self, buf: DeviceBuffer, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).view(np.uint8).ravel()
        self._mem[buf.addr][: raw.size] = raw.tobytes()

    def download(self, buf: DeviceBuffer, nbytes: int | None = None) -> np.ndarray:
        size = buf.nbytes if nbytes is None else nbytes
        return np.frombuffer(bytes(self._mem[buf.addr][:size]), dtype=np.uint8).copy()

    def memset(self, buf: DeviceBuffer, value: int, nbytes: int | None = None) -> None:
        size = buf.nbytes if nbytes is None else nbytes
        self._mem[buf.addr][:size] = bytes([value]) * size

    def _read(self, addr: int, nbytes: int) -> np.ndarray:
        if addr not in self._mem or nbytes > len(self._mem[addr]):
            raise DeviceError(f"model kernel read {nbytes} bytes at unmapped {addr:#x}")
        return np.frombuffer(bytes(self._mem[addr][:nbytes]), dtype=np.uint8)

    def launch(self, kernel, grid, block, kernarg: bytes) -> None:
        self.launches.append((grid, kernarg))
        ka = unpack_kernarg(kernarg)
        m, n, k = ka["M"], ka["N"], ka["K"]
        kp = ka["stride_A0"] // 2  # strides are in fp4 elements
        a = self._read(ka["ptr_A"], m * kp).reshape(m, kp)
        b = self._read(ka["ptr_B"], n * ka["stride_B0"] // 2).reshape(n, kp)
        if "noBpreShuffle" not in kernel.symbol and self.honour_b_shuffle:
            b = unshuffle_b(b)
        sa = self._scales(ka["ptr_ScaleA"], m, ka["stride_ScaleA0"], k)
        sb = self._scales(ka["ptr_ScaleB"], n, ka["stride_ScaleB0"], k)
        a_val, b_val = dequantize(a, sa), dequantize(b, sb)
        gdz = grid[2]
        stride = ka["stride_C0"]
        d = self._mem[ka["ptr_D"]]
        d_bits = np.frombuffer(d, dtype=np.uint16)[: m * stride].reshape(m, stride)[:, :n]
        if gdz == 1:
            out = float_to_bf16_bits((a_val @ b_val.T) * ka["alpha"])
            d_bits[...] = out
            return
        chunk = round_up(k // (1 << ka["log2_k_split"]), 256)
        for z in range(gdz):
            part = a_val[:, z * chunk : (z + 1) * chunk] @ b_val[:, z * chunk : (z + 1) * chunk].T
            part_bf16 = bf16_bits_to_float(float_to_bf16_bits(part * ka["alpha"]))
            d_bits[...] = float_to_bf16_bits(bf16_bits_to_float(d_bits) + part_bf16)

    def _scales(self, addr: int, rows: int, cols: int, k: int) -> np.ndarray:
        rows32 = round_up(rows, 32)
        shuffled = self._read(addr, rows32 * cols).reshape(rows32, cols)
        return unshuffle_scales(shuffled)[:rows, : k // 32]

    def time_launches(self, kernel, grid, block, kernarg, iters, warmup, zero_before_each):
        raise DeviceError("the host model does not time")

    def close(self) -> None:
        self._mem.clear()


class TimingModelDevice(HostModelDevice):
    """The host model with wall-clock timing, to exercise the timed path of the host flow."""

    device_id = "hostmodel-timed"
    can_time = True

    def __init__(self) -> None:
        super().__init__()
        self.zeroed_before_timed: list[int] = []

    def time_launches(self, kernel, grid, block, kernarg, iters, warmup, zero_before_each):
        import time

        def one() -> None:
            if zero_before_each is not None:
                self.memset(zero_before_each, 0)
                self.zeroed_before_timed.append(zero_before_each.addr)
            self.launch(kernel, grid, block, kernarg)

        for _ in range(warmup):
            one()
        start = time.perf_counter()
        for _ in range(iters):
            one()
        return (time.perf_counter() - start) * 1e6 / iters

    def time_launch_series(self, kernel, grid, block, kernargs, zero_before_each, protocol):
        """Per-launch wall clock, the protocol's shape, kernargs in turn (as HipDevice)."""
        import time

        import numpy as np

        turn = iter(range(1 << 62))

        def one() -> None:
            j = next(turn) % len(kernargs)
            if zero_before_each[j] is not None:
                self.memset(zero_before_each[j], 0)
                self.zeroed_before_timed.append(zero_before_each[j].addr)
            self.launch(kernel, grid, block, kernargs[j])

        for _ in range(protocol.warmup):
            one()
        out = np.empty((protocol.repeats, protocol.launches))
        for r in range(protocol.repeats):
            for i in range(protocol.launches):
                start = time.perf_counter()
                one()
                out[r, i] = (time.perf_counter() - start) * 1e6
        return out
