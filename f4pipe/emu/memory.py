"""The emulator's global memory: numpy byte arrays at fake device addresses.

Kernels address memory through 64-bit pointers that the host packs into the kernarg block, so
each allocation gets a device address (aligned, with an unmapped gap after it so running off
the end of one buffer never lands in the next). Every access is checked: an address outside
all allocations or a misaligned dword access raises EmulatorError — on hardware that would be
a page fault or an undefined result, never something to paper over.

Race detection: during a launch (begin_launch .. end_launch) every dword written by a
non-atomic store remembers the workgroup that wrote it. A second workgroup writing the same
dword is a race on hardware (workgroups run in no defined order and nothing orders their
stores), whatever the emulator's order made of it; atomics are exempt. end_launch returns a
RaceReport: how many dwords raced and the first few conflicts, with both writers.

Deferred writes (defer_writes .. take_journal): stores are checked as usual but kept in a
Journal instead of landing, so a caller can run several workgroups in lockstep and still apply
their stores as if each had run alone, one after another (EmulatorDevice's isolated
workgroups). That holds only if no workgroup reads an allocation any of them writes (then no
workgroup can see another's stores, whatever the order): the journal records which
allocations were read and written, and a load from an allocation already written, an atomic,
or a store whose writers are unknown raises WriteConflict at once.
"""

from __future__ import annotations

import ctypes
import functools
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from f4pipe.core.errors import EmulatorError

#: First device address handed out; nonzero so a null pointer is never a valid address.
HEAP_BASE = 0x7F00_0000_0000
#: Allocation alignment and the unmapped gap left after each allocation.
ALIGN = 4096
GAP = 1 << 20
#: Conflicts a RaceReport keeps in full (the count covers all of them).
MAX_RACE_EVENTS = 16
_WG_BITS = 24  # workgroup numbers packed beside word indices when sorting writers


@dataclass(frozen=True)
class RaceEvent:
    """One dword written by two workgroups: its address and both (workgroup, store site)."""

    address: int
    allocation: int  # start address of the allocation holding it
    offset: int  # byte offset in that allocation
    first_workgroup: int  # launch-order workgroup number (x fastest, then y, z)
    first_site: str  # "<instruction> pc 0x..." of the earlier store
    second_workgroup: int
    second_site: str


@dataclass
class RaceReport:
    """Dwords written by non-atomic stores of more than one workgroup in one launch."""

    raced_dwords: int = 0
    events: list[RaceEvent] = field(default_factory=list)

    @property
    def count(self) -> int:
        return self.raced_dwords

    def summary(self, workgroup_name=str) -> str:
        """One line: the count and the first conflict (workgroups named by `workgroup_name`)."""
        if not self.raced_dwords:
            return "no races"
        e = self.events[0]
        return (
            f"{self.raced_dwords} dword(s) written by several workgroups; first at "
            f"{e.address:#x} (+{e.offset} in the allocation at {e.allocation:#x}): workgroup "
            f"{workgroup_name(e.first_workgroup)} ({e.first_site}) then "
            f"{workgroup_name(e.second_workgroup)} ({e.second_site})"
        )


class _WriteLog:
    """Per allocation: which workgroup (and store site) first wrote each dword, and raced ones."""

    def __init__(self) -> None:
        self.owner: dict[int, np.ndarray] = {}  # allocation start -> int32 [words], -1 unwritten
        self.site: dict[int, np.ndarray] = {}  # allocation start -> int32 site index
        self.raced: dict[int, np.ndarray] = {}  # allocation start -> bool [words]
        self.sites: list[str] = []
        self.site_index: dict[str, int] = {}
        self.report = RaceReport()

    def arrays(self, start: int, words: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if start not in self.owner:
            self.owner[start] = np.full(words, -1, dtype=np.int32)
            self.site[start] = np.zeros(words, dtype=np.int32)
            self.raced[start] = np.zeros(words, dtype=bool)
        return self.owner[start], self.site[start], self.raced[start]

    def site_of(self, site: str) -> int:
        if site not in self.site_index:
            self.site_index[site] = len(self.sites)
            self.sites.append(site)
        return self.site_index[site]

    @staticmethod
    def _no_conflict(owner: np.ndarray, idx: np.ndarray, wg: np.ndarray) -> bool:
        """The common store: distinct dwords, each unwritten or last written by the same
        workgroup. Then record's general path (two np.unique over the store) would find no
        race and set exactly owner[idx] = wg; a sort finds that out far faster."""
        prev = owner[idx]
        if ((prev >= 0) & (prev != wg)).any():
            return False
        ordered = np.sort(idx, axis=None)
        return not (ordered[1:] == ordered[:-1]).any()

    def record(self, start: int, words: int, idx: np.ndarray, wg: np.ndarray, site: str) -> None:
        """Note a store of dwords `idx` by workgroups `wg` (same shape) at `site`."""
        owner, owner_site, raced = self.arrays(start, words)
        sid = self.site_of(site)
        if self._no_conflict(owner, idx, wg):
            owner[idx] = wg
            owner_site[idx] = sid
            return
        key = np.unique((idx.astype(np.int64) << _WG_BITS) | wg.astype(np.int64))
        kidx, kwg = key >> _WG_BITS, key & ((1 << _WG_BITS) - 1)
        uidx, first, counts = np.unique(kidx, return_index=True, return_counts=True)
        first_wg = kwg[first]
        prev = owner[uidx]
        within = counts > 1  # two workgroups in this very store (lockstep)
        across = (prev >= 0) & (prev != first_wg)
        new = (within | across) & ~raced[uidx]
        if new.any():
            self.report.raced_dwords += int(new.sum())
            raced[uidx[new]] = True
            room = MAX_RACE_EVENTS - len(self.report.events)
            for j in np.nonzero(new)[0][: max(room, 0)]:
                if across[j]:
                    a, a_site, b = int(prev[j]), self.sites[owner_site[uidx[j]]], int(first_wg[j])
                else:
                    a, a_site, b = int(first_wg[j]), site, int(kwg[first[j] + 1])
                self.report.events.append(
                    RaceEvent(
                        address=start + 4 * int(uidx[j]),
                        allocation=start,
                        offset=4 * int(uidx[j]),
                        first_workgroup=a,
                        first_site=a_site,
                        second_workgroup=b,
                        second_site=site,
                    )
                )
        owner[uidx] = first_wg  # a dword with two writers is already marked raced
        owner_site[uidx] = sid


#: glibc mallopt parameters (malloc.h) and the sizes f4pipe sets them to.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
HOST_MMAP_THRESHOLD = 256 << 20
HOST_TRIM_THRESHOLD = 1 << 30


@functools.cache
def keep_freed_host_memory() -> bool:
    """Let glibc keep freed blocks of up to 256 MiB in the heap instead of unmapping them.

    Every emulated instruction allocates numpy temporaries of a few MiB for a full batch
    (512 waves x 64 lanes). By default glibc serves those by mmap and unmaps them on free, so
    each instruction page-faults its temporaries afresh: at 2048x2048x512 that was 560k minor
    faults and a third of the run's CPU time (sys), against 23k faults with the heap kept.
    Results do not change. Returns False where there is no glibc mallopt (then nothing
    changes)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(
        mallopt(M_MMAP_THRESHOLD, HOST_MMAP_THRESHOLD)
        and mallopt(M_TRIM_THRESHOLD, HOST_TRIM_THRESHOLD)
    )


class LaunchesFault(EmulatorError):
    """Accesses of the named launches (positions in a partitioned batch) would fault or
    reach another launch's memory; raised before the access touches anything."""

    def __init__(self, message: str, launches: frozenset[int]) -> None:
        super().__init__(message)
        self.launches = launches


class WriteConflict(Exception):
    """A batch with deferred writes read or atomically updated memory the journal holds (or
    stored without naming its writers): its workgroups must run one at a time instead."""


@dataclass(frozen=True)
class DeferredStore:
    """One deferred write_dwords call (its arguments, copied)."""

    addr: np.ndarray
    values: np.ndarray
    what: str
    writers: np.ndarray
    site: str


@dataclass
class Journal:
    """The stores deferred since defer_writes, in issue order, and the allocations (by start
    address) that loads read and stores wrote meanwhile."""

    stores: list[DeferredStore] = field(default_factory=list)
    read: set[int] = field(default_factory=set)
    written: set[int] = field(default_factory=set)

    @property
    def independent(self) -> bool:
        """No load read an allocation a store wrote: replaying the stores workgroup by
        workgroup, in any order, is what running the workgroups one after another gives."""
        return not self.read & self.written


class GlobalMemory:
    """Allocations keyed by device address; dword gathers/scatters across lanes at once."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._arrays: dict[int, np.ndarray] = {}
        self._next = HEAP_BASE
        self._log: _WriteLog | None = None
        self._journal: Journal | None = None
        #: While several launches run as one batch (f4pipe.emu.colaunch): the launch owning
        #: each allocation (by start address); an access must stay in its own launch's.
        self._owners: dict[int, int] | None = None
        #: Allocations set aside (hide_all_but): start -> bytes.
        self._hidden: dict[int, np.ndarray] = {}
        #: _tables' arrays, found again after any change to the allocations or the partition.
        self._tables_cache: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    # --- allocation ----------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        if nbytes < 0:
            raise EmulatorError(f"cannot allocate {nbytes} bytes")
        size = -(-max(nbytes, 4) // 4) * 4  # whole dwords so uint32 views always exist
        addr = self._next
        self._next = addr + -(-size // ALIGN) * ALIGN + GAP
        self._starts.append(addr)
        self._arrays[addr] = np.zeros(size, dtype=np.uint8)
        self._tables_cache = None
        return addr

    def free(self, addr: int) -> None:
        if addr not in self._arrays:
            raise EmulatorError(f"free of {addr:#x}, which is not an allocation start")
        del self._arrays[addr]
        self._starts.remove(addr)
        self._tables_cache = None

    def array(self, addr: int) -> np.ndarray:
        """The byte array of the allocation starting at `addr`."""
        try:
            return self._arrays[addr]
        except KeyError:
            raise EmulatorError(f"{addr:#x} is not the start of an allocation") from None

    def layout(self) -> tuple[tuple[int, int], ...]:
        """(start, size) of every allocation, by address: what decides which accesses fault."""
        return tuple((start, self._arrays[start].size) for start in sorted(self._starts))

    # --- several launches in one batch ---------------------------------------------------

    def partition(self, owners: dict[int, int] | None) -> None:
        """Name the launch owning each allocation (None: stop checking). While set, an
        access carrying its waves' launches (`owners` of read_dwords / write_dwords) that
        reaches an allocation of another launch raises EmulatorError: run alone, that launch
        would not have seen the allocation."""
        self._owners = owners
        self._tables_cache = None

    def hide_all_but(self, keep: set[int]) -> None:
        """Set aside every allocation whose start is not in `keep` until show_all: a launch
        then sees the memory it would see run alone (what faults, and where)."""
        for start in [s for s in self._starts if s not in keep]:
            self._hidden[start] = self._arrays.pop(start)
            self._starts.remove(start)
        self._tables_cache = None

    def show_all(self) -> None:
        """Bring back what hide_all_but set aside."""
        self._arrays.update(self._hidden)
        self._starts = sorted([*self._starts, *self._hidden])
        self._hidden.clear()
        self._tables_cache = None

    def _tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(starts, ends, owners) of the allocations by address, as arrays for searchsorted;
        ends and owners carry one more entry (0, -1) that an index of -1 (an address below
        every allocation) picks. Kept until the allocations or the partition change: every
        access of a batch of several launches looks them up."""
        if self._tables_cache is None:
            owners = self._owners or {}
            starts = np.array(self._starts, dtype=np.int64)
            ends = np.array([s + self._arrays[s].size for s in self._starts] + [0], dtype=np.int64)
            owner_of = np.array([owners.get(s, -1) for s in self._starts] + [-1], dtype=np.int64)
            self._tables_cache = (starts, ends, owner_of)
        return self._tables_cache

    # --- race detection ------------------------------------------------------------------

    def begin_launch(self) -> None:
        """Start recording which workgroup writes each dword (see the module docstring)."""
        self._log = _WriteLog()

    def end_launch(self) -> RaceReport:
        """Stop recording; the launch's races."""
        log, self._log = self._log, None
        return log.report if log is not None else RaceReport()

    # --- deferred writes -----------------------------------------------------------------

    def defer_writes(self) -> None:
        """Keep stores in a journal from now on (see the module docstring)."""
        self._journal = Journal()

    def take_journal(self) -> Journal:
        """Stop deferring; what was deferred since defer_writes."""
        journal, self._journal = self._journal or Journal(), None
        return journal

    def _note_read(self, starts: list[int]) -> None:
        if self._journal is None:
            return
        self._journal.read.update(starts)
        if self._journal.written.intersection(starts):
            raise WriteConflict("a load reads memory a deferred store wrote")

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
        starts, ends, _ = self._tables()
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

    def _word_groups(
        self, addr: np.ndarray, what: str, owners: np.ndarray | None = None
    ) -> list[WordGroup]:
        """The dword addresses `addr` grouped by the allocation holding them, after every
        check: misaligned or outside every allocation raises EmulatorError; under partition,
        with `owners` (the launch of each address's wave), one that would fault or reaches
        another launch's allocation raises LaunchesFault first, naming every such launch.

        One allocation lookup (searchsorted) serves the checks and the grouping, and a
        stable sort of the allocation numbers makes each group a run of positions: a batch
        of several launches touches tens of allocations per instruction, and a boolean mask
        per allocation cost a pass over every address each."""
        flat = addr.reshape(-1)
        if flat.size == 0:
            return []
        partitioned = self._owners is not None and owners is not None
        if not partitioned:
            if (flat & 3).any():
                bad = int(flat[(flat & 3) != 0][0])
                raise EmulatorError(f"{what}: misaligned dword address {bad:#x}")
            found = self._locate(int(flat.min()), int(flat.max()) + 4)
            if found is not None:
                start, arr = found
                return [WordGroup(None, start, arr.view(np.uint32), (flat - start) >> 2)]
        starts, ends, owner_of = self._tables()
        which = np.searchsorted(starts, flat, side="right") - 1  # -1: below every one
        if partitioned:
            good = (owner_of[which] == owners.reshape(-1)) & (flat + 4 <= ends[which])
            good &= (flat & 3) == 0
            if not good.all():
                launches = frozenset(int(j) for j in np.unique(owners.reshape(-1)[~good]))
                raise LaunchesFault(f"{what}: a faulting or cross-launch access", launches)
        else:
            outside = flat + 4 > ends[which]  # ends[-1] is 0: below every allocation
            if outside.any():
                first = int(which[outside].min())
                raise self._fault(flat[which == first], what)
        counts = np.bincount(which)  # every which >= 0 now
        used = np.flatnonzero(counts)
        if used.size == 1:
            start = int(starts[used[0]])
            words = self._arrays[start].view(np.uint32)
            return [WordGroup(None, start, words, (flat - start) >> 2)]
        groups = []
        for i, positions in positions_by_key(which, counts):
            start = int(starts[i])
            words = self._arrays[start].view(np.uint32)
            groups.append(WordGroup(positions, start, words, (flat[positions] - start) >> 2))
        return groups

    def read_dwords(
        self, addr: np.ndarray, what: str = "load", owners: np.ndarray | None = None
    ) -> np.ndarray:
        """uint32 at each (int64) address; shape follows `addr`. `owners`: the launch of
        each address's wave, checked against partition's."""
        groups = self._word_groups(addr, what, owners)
        self._note_read([g.start for g in groups])
        if len(groups) == 1 and groups[0].positions is None:
            return groups[0].words[groups[0].index].reshape(addr.shape)
        out = np.empty(addr.size, dtype=np.uint32)
        for g in groups:
            out[g.positions] = g.words[g.index]
        return out.reshape(addr.shape)

    def write_dwords(
        self,
        addr: np.ndarray,
        values: np.ndarray,
        what: str = "store",
        writers: np.ndarray | None = None,
        site: str = "",
        owners: np.ndarray | None = None,
    ) -> None:
        """Store uint32 values; for duplicate addresses the last in C order wins (highest lane).

        `writers` (same shape as addr): the launch-order workgroup of each dword, for race
        detection while a launch is recorded; `site` names the store in race reports;
        `owners` as in read_dwords."""
        groups = self._word_groups(addr, what, owners)
        if self._journal is not None:
            if writers is None:
                raise WriteConflict("a deferred store does not name its writers")
            self._journal.written.update(g.start for g in groups)
            self._journal.stores.append(
                DeferredStore(
                    addr.copy(),
                    np.array(np.broadcast_to(values, addr.shape)),
                    what,
                    np.array(np.broadcast_to(writers, addr.shape)),
                    site,
                )
            )
            return
        flat_values = np.broadcast_to(values, addr.shape).reshape(-1)
        flat_writers = None if writers is None else np.broadcast_to(writers, addr.shape).ravel()
        for g in groups:
            g.words[g.index] = g.pick(flat_values)
            if self._log is not None and flat_writers is not None:
                self._log.record(g.start, g.words.size, g.index, g.pick(flat_writers), site or what)

    def dword_views(self, addr: np.ndarray, what: str) -> list[WordGroup]:
        """For read-modify-write operations (atomics): the groups of `addr` (flat) by
        allocation, each with its uint32 view and word indices."""
        if self._journal is not None:
            raise WriteConflict("an atomic cannot be deferred")
        return self._word_groups(addr, what)


def positions_by_key(keys: np.ndarray, counts: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(key, its positions in the flat `keys`, in C order) for every key that occurs, in key
    order; `counts` is np.bincount(keys). One stable sort instead of a boolean mask per key:
    an access of a batch of launches spans tens of allocations, a store tens of launches."""
    small = np.int16 if counts.size <= np.iinfo(np.int16).max else np.int64
    order = np.argsort(keys.reshape(-1).astype(small), kind="stable")
    ends = np.cumsum(counts)
    return [(int(k), order[ends[k] - counts[k] : ends[k]]) for k in np.flatnonzero(counts)]


@dataclass(frozen=True)
class WordGroup:
    """The addresses of one access that fall in one allocation."""

    positions: np.ndarray | None  # their positions in the flattened access; None: all of it
    start: int  # the allocation's device address
    words: np.ndarray  # the allocation as uint32
    index: np.ndarray  # word index into `words` of each address, in C order

    def pick(self, per_address: np.ndarray) -> np.ndarray:
        """This group's elements of a flat array with one element per address."""
        return per_address if self.positions is None else per_address[self.positions]
