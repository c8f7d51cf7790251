"""The emulator's global memory: numpy byte arrays at fake device addresses.

Kernels address memory through 64-bit pointers that the host packs into the kernarg block, so
each allocation gets a device address (aligned, with an unmapped gap after it so running off
the end of one buffer never lands in the next). Every access is checked: an address outside
all allocations or a misaligned dword access raises EmulatorError — on hardware that would be
a page fault or an undefined result, never something to paper over.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from f4pipe.errors import EmulatorError

#: First device address handed out; nonzero so a null pointer is never a valid address.
HEAP_BASE = 0x7F00_0000_0000
#: Allocation alignment and the unmapped gap left after each allocation.
ALIGN = 4096
GAP = 1 << 20


class GlobalMemory:
    """Allocations keyed by device address; dword gathers/scatters across lanes at once."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._arrays: dict[int, np.ndarray] = {}
        self._next = HEAP_BASE

    # --- allocation ----------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        if nbytes < 0:
            raise EmulatorError(f"cannot allocate {nbytes} bytes")
        size = -(-max(nbytes, 4) // 4) * 4  # whole dwords so uint32 views always exist
        addr = self._next
        self._next = addr + -(-size // ALIGN) * ALIGN + GAP
        self._starts.append(addr)
        self._arrays[addr] = np.zeros(size, dtype=np.uint8)
        return addr

    def free(self, addr: int) -> None:
        if addr not in self._arrays:
            raise EmulatorError(f"free of {addr:#x}, which is not an allocation start")
        del self._arrays[addr]
        self._starts.remove(addr)

    def array(self, addr: int) -> np.ndarray:
        """The byte array of the allocation starting at `addr`."""
        try:
            return self._arrays[addr]
        except KeyError:
            raise EmulatorError(f"{addr:#x} is not the start of an allocation") from None

    def num_allocations(self) -> int:
        return len(self._starts)

    # --- lane accesses -------------------------------------------------------------------

    def _locate(self, lo: int, hi: int) -> tuple[int, np.ndarray] | None:
        """The allocation holding all of [lo, hi), or None when the range spans several."""
        i = bisect_right(self._starts, lo) - 1
        if i < 0:
            return None
        start = self._starts[i]
        arr = self._arrays[start]
        if hi <= start + arr.size:
            return start, arr
        return None

    def _fault(self, addr: np.ndarray, what: str) -> EmulatorError:
        """Name the first address outside every allocation, relative to the one below it."""
        starts = np.array(self._starts, dtype=np.int64)
        ends = np.array([s + self._arrays[s].size for s in self._starts], dtype=np.int64)
        which = np.searchsorted(starts, addr, side="right") - 1
        outside = (which < 0) | (addr + 4 > ends[np.maximum(which, 0)])
        bad = addr[outside]
        if bad.size == 0:
            return EmulatorError(f"{what}: one access spans several allocations")
        a, i = int(bad.min()), int(which[outside][np.argmin(bad)])
        hi = int(bad.max())
        if i < 0:
            return EmulatorError(f"{what} at device address {a:#x}: below every allocation")
        start, size = self._starts[i], self._arrays[self._starts[i]].size
        return EmulatorError(
            f"{what} at device addresses {a:#x}..{hi + 3:#x}: {a - start - size} to "
            f"{hi + 4 - start - size} bytes past the end of the {size}-byte allocation at "
            f"{start:#x} ({bad.size} dwords outside every allocation)"
        )

    def _word_index(
        self, addr: np.ndarray, what: str
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Group dword addresses by allocation: (selector, uint32 view, word index) triples."""
        if addr.size == 0:
            return []
        if (addr & 3).any():
            bad = int(addr[(addr & 3) != 0][0])
            raise EmulatorError(f"{what}: misaligned dword address {bad:#x}")
        lo, hi = int(addr.min()), int(addr.max()) + 4
        found = self._locate(lo, hi)
        if found is not None:
            start, arr = found
            return [(np.ones(addr.shape, dtype=bool), arr.view(np.uint32), (addr - start) >> 2)]
        groups = []
        starts = np.array(self._starts, dtype=np.int64)
        which = np.searchsorted(starts, addr, side="right") - 1
        for i in np.unique(which):
            sel = which == i
            if i < 0:
                raise self._fault(addr[sel], what)
            start = int(starts[i])
            arr = self._arrays[start]
            if int(addr[sel].max()) + 4 > start + arr.size:
                raise self._fault(addr[sel], what)
            groups.append((sel, arr.view(np.uint32), (addr[sel] - start) >> 2))
        return groups

    def read_dwords(self, addr: np.ndarray, what: str = "load") -> np.ndarray:
        """uint32 at each (int64) address; shape follows `addr`."""
        out = np.zeros(addr.shape, dtype=np.uint32)
        for sel, words, idx in self._word_index(addr, what):
            if sel.all():
                return words[idx]
            out[sel] = words[idx]
        return out

    def write_dwords(self, addr: np.ndarray, values: np.ndarray, what: str = "store") -> None:
        """Store uint32 values; for duplicate addresses the last in C order wins (highest lane)."""
        for sel, words, idx in self._word_index(addr, what):
            words[idx] = values if sel.all() else values[sel]

    def dword_views(
        self, addr: np.ndarray, what: str
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """For read-modify-write operations (atomics): (selector, uint32 view, index) groups."""
        return self._word_index(addr, what)
