"""The timing rules of f4pipe.analysis.timing checked as a launch runs: one batch of waves'
abstract states, counter sequence numbers, barrier generations and LDS words (who last wrote
and read each), so that LDS order between waves, whose addresses are data, is checked on the
addresses the launch computes. The emulator's executor carries one TimingRun per batch."""

from __future__ import annotations

import numpy as np

from f4pipe.analysis.timing import (
    GENERATIONS,
    LDS,
    VM,
    Hazard,
    HazardReport,
    TimingModel,
    Transition,
)
from f4pipe.arch.effects import NO_OFFSETS

#: LDS word tags (int32): writer = (sequence + 1) << 5 | LDS-DMA << 4 | wave in its workgroup;
#: reader = sequence + 1. Sequence numbers grow across the batches and launches that share an
#: LdsWords, so stale tags always read as retired and the arrays are never cleared.
W_SEQ_SHIFT, W_DMA_BIT, W_WAVE_MASK = 5, 1 << 4, 0xF
SEQ_LIMIT = (1 << 26) - 1
NEVER = np.iinfo(np.int64).max
I32_MAX = np.iinfo(np.int32).max


class LdsWords:
    """Per workgroup slot and LDS word: the last write's tag; per wave slot: its last read's.

    Kept for the process (f4pipe.emu.batch.lds_pool) and reused (see the tag comment), so the
    large arrays are allocated and faulted in once, not per batch or device. `base` is the
    first sequence number the next batch uses."""

    def __init__(self, num_wg: int, words: int, waves_per_group: int) -> None:
        self.shape = (num_wg, words, waves_per_group)
        self.w_tag = np.zeros((num_wg, words), np.int32)
        self.r_tag = np.zeros((num_wg, words, waves_per_group), np.int32)
        self.base = 0

    def fits(self, num_wg: int, words: int, waves_per_group: int) -> bool:
        return (
            num_wg <= self.shape[0] and words <= self.shape[1] and waves_per_group == self.shape[2]
        )

    def advance(self, used: int) -> None:
        """Move `base` past the sequence numbers a batch used; clear when they would overflow."""
        self.base = used + 1
        if self.base > SEQ_LIMIT // 2:
            self.w_tag.fill(0)
            self.r_tag.fill(0)
            self.base = 0


class PcLog:
    """The pc of each wave's n-th op of a counter (for naming the other side of a hazard)."""

    def __init__(self, waves: int, base: int) -> None:
        self.base = base
        self.pcs = np.zeros((waves, 64), np.int64)

    def record(self, waves: np.ndarray, seq: np.ndarray, pc: int) -> None:
        i = seq - self.base
        top = int(i.max()) if i.size else 0
        if top >= self.pcs.shape[1]:
            grown = np.zeros((self.pcs.shape[0], max(2 * self.pcs.shape[1], top + 1)), np.int64)
            grown[:, : self.pcs.shape[1]] = self.pcs
            self.pcs = grown
        self.pcs[waves, i] = pc

    def pc(self, wave: int, seq: int) -> int:
        return int(self.pcs[wave, seq - self.base])


class TimingRun:
    """The timing state of one batch of waves (Executor.timing): abstract state per wave,
    counter sequence numbers, barrier generations, LDS words. Hazards go to `report`, or with
    per_workgroup to `events` (see _report)."""

    def __init__(
        self,
        model: TimingModel,
        report: HazardReport,
        lds: LdsWords,
        *,
        num_waves: int,
        wave_wg: np.ndarray,
        waves_per_group: int,
        per_workgroup: bool = False,
    ) -> None:
        self.model = model
        self.report = report
        #: per_workgroup: (batch workgroup, hazard, where) in the order each workgroup met them,
        #: instead of report entries (EmulatorDevice's isolated batches merge them in order).
        self.events: list[tuple[int, Hazard, str]] | None = [] if per_workgroup else None
        W = num_waves
        self.W = W
        self.state = np.zeros(W, np.int64)
        self.uniform: int | None = 0  # every wave in the same abstract state (the common case)
        # The wave selection the last step advanced, when its waves left it in one state: the
        # step loop hands the same selection back while that group runs straight-line code.
        self._held: tuple[np.ndarray, int] | None = None
        base = lds.base
        self.issued = np.full((2, W), base, np.int64)  # [VM | LDS, wave]: next sequence number
        self.retired = np.full((2, W), base, np.int64)  # every op below this has retired
        self.gen = np.zeros(W, np.int64)  # barriers each wave has arrived at
        self.snap = np.full((2, W, GENERATIONS), base, np.int64)  # retired at each barrier
        self.snap_issued = np.full((2, W, GENERATIONS), base, np.int64)  # issued by then
        self.wave_wg = wave_wg
        self.wpg = waves_per_group
        self.first_wave = (np.arange(W) // waves_per_group) * waves_per_group  # of its workgroup
        self.lds = lds
        self.logs = (PcLog(W, base), PcLog(W, base))  # [VM | LDS]
        self.seq = np.zeros(W, np.int64)  # per wave: sequence number of the op being issued

    def finish(self) -> None:
        """Hand the used sequence numbers back to the shared LdsWords."""
        self.lds.advance(int(self.issued.max()))

    # --- per step -----------------------------------------------------------------------------

    def before(self, ex, inst, sel, offsets=NO_OFFSETS) -> None:
        """Advance the selected waves' abstract state over `inst` (before it executes)."""
        full = isinstance(sel, slice)
        held = self._held
        self._held = None
        if full and self.uniform is not None:
            t = self.model.transition(self.uniform, inst.pc, offsets)
            self.uniform = t.next
            self._apply(ex, inst, sel, t)
        elif held is not None and held[0] is sel:  # the same waves, still in one state
            t = self.model.transition(held[1], inst.pc, offsets)
            self.state[sel] = t.next
            self._apply(ex, inst, sel, t)
            self._held = (sel, t.next)
        else:
            if self.uniform is not None:
                self.state[:] = self.uniform
                self.uniform = None
            ids = self.state[sel]
            first = int(ids[0]) if ids.size else 0
            if (ids == first).all():
                t = self.model.transition(first, inst.pc, offsets)
                self.state[sel] = t.next
                self._apply(ex, inst, sel, t)
                if not full:
                    self._held = (sel, t.next)
            else:
                waves = np.arange(self.W)[sel]
                for sid in np.unique(ids):
                    part = waves[ids == sid]
                    t = self.model.transition(int(sid), inst.pc, offsets)
                    self.state[part] = t.next
                    self._apply(ex, inst, part, t)
            if full and (self.state == self.state[0]).all():
                self.uniform = int(self.state[0])
        if t.counter >= 0:  # the same instruction: every split group has the same flags
            c = t.counter
            self.seq[sel] = self.issued[c, sel]
            self.issued[c, sel] += 1
            if t.log:
                self.logs[c].record(np.arange(self.W)[sel], self.seq[sel], inst.pc)
        if t.barrier:
            self._arrive(sel)
        elif t.endpgm:
            self._end(sel)

    def _apply(self, ex, inst, sel, t: Transition) -> None:
        if t.hazards:
            for h in t.hazards:
                self._report(ex, h, sel)
        if t.retire_vm:
            self.retired[VM, sel] += t.retire_vm
        if t.retire_lds:
            self.retired[LDS, sel] += t.retire_lds

    def _arrive(self, sel) -> None:
        slot = self.gen[sel] % GENERATIONS
        waves = np.arange(self.W)[sel]
        self.snap[:, waves, slot] = self.retired[:, waves]
        self.snap_issued[:, waves, slot] = self.issued[:, waves]
        self.gen[sel] += 1

    def _end(self, sel) -> None:
        """s_endpgm retires everything: all of the wave's writes are visible from now on."""
        waves = np.arange(self.W)[sel]
        self.retired[:, waves] = self.issued[:, waves]
        self.snap[:, waves, :] = self.issued[:, waves, None]
        self.snap_issued[:, waves, :] = self.issued[:, waves, None]

    # --- LDS words (called by the DS and LDS-DMA handlers) ------------------------------------

    def _limits(self, readers: np.ndarray) -> np.ndarray:
        """[2, n]: per reader, sequence numbers below which every writer of its workgroup has
        made its LDS DMA (0) / DS (1) writes visible to it. The bound is the minimum over the
        writers, so a word under it is surely visible; others get the exact check."""
        slot = ((self.gen[readers] - 1) % GENERATIONS)[:, None]
        writers = self.first_wave[readers][:, None] + np.arange(self.wpg)  # [n, wpg]
        seen = self.snap[:, writers, slot]  # [2, n, wpg]
        own = writers == readers[:, None]
        seen[VM] = np.where(own, self.retired[VM, readers][:, None], seen[VM])
        seen[LDS] = np.where(own, NEVER, seen[LDS])  # own DS writes: in order
        return seen.min(axis=2)

    def lds_read(self, ex, inst, sel, widx: np.ndarray, lanes: np.ndarray) -> None:
        """A DS read of words widx [n, 64, ndw] by the selected waves (lanes: active [n, 64])."""
        lw = self.lds
        waves = np.arange(self.W)[sel]
        rows = self.wave_wg[waves][:, None, None]
        flat = rows * lw.shape[1] + widx  # [n, 64, ndw] into w_tag's flat view: one gather
        tag = lw.w_tag.reshape(-1)[flat]
        seq1 = (tag >> W_SEQ_SHIFT).astype(np.int64)
        limit = self._limits(waves)[:, :, None, None]
        bad = seq1 > np.where(tag & W_DMA_BIT, limit[VM], limit[LDS])
        if not ex.exec_full:
            bad &= lanes[..., None]
        if bad.any():
            self._too_early_exact(ex, inst, sel, waves, rows, widx, bad, "reads")
        stamp = (self.seq[waves] + 1).astype(np.int32)
        local = (waves - self.first_wave[waves])[:, None, None]
        if ex.exec_full:
            at = flat * self.wpg
            at += local  # in place: the index is the largest array here
            lw.r_tag.reshape(-1)[at] = stamp[:, None, None]
        else:
            m = np.broadcast_to(lanes[..., None], widx.shape)
            full = np.broadcast_to(stamp[:, None, None], widx.shape)
            r, loc = np.broadcast_to(rows, widx.shape), np.broadcast_to(local, widx.shape)
            lw.r_tag[r[m], widx[m], loc[m]] = full[m]

    def _too_early_exact(self, ex, inst, sel, waves, rows, widx, suspect, verb: str) -> None:
        """The exact check for words the fast bound could not clear; reports the first.
        verb: "reads" (a DS read of a word not yet visible) or "overwrites" (a write to a word
        an LDS DMA may still land on)."""
        n_idx, lane, d = np.nonzero(suspect)
        reader = waves[n_idx]
        word = widx[n_idx, lane, d]
        tag = self.lds.w_tag[rows[n_idx, 0, 0], word].astype(np.int64)
        writer = self.first_wave[reader] + (tag & W_WAVE_MASK)
        dma = (tag & W_DMA_BIT) != 0
        seq = (tag >> W_SEQ_SHIFT) - 1
        slot = (self.gen[reader] - 1) % GENERATIONS
        counter = np.where(dma, VM, LDS)
        own = writer == reader
        limit = np.where(
            own,
            np.where(dma, self.retired[VM, reader], NEVER),
            self.snap[counter, writer, slot],
        )
        bad = seq >= limit
        if bad.any():
            for i in self._first_per_report(bad, self.wave_wg[reader]):
                self._too_early(ex, inst, sel, i, writer, reader, word, counter, seq, own, verb)

    def _too_early(
        self, ex, inst, sel, i, writer, reader, word, counter, seq, own, verb="reads"
    ) -> None:
        w_pc = self.logs[int(counter[i])].pc(int(writer[i]), int(seq[i]))
        who = "this wave" if own[i] else f"wave {int(writer[i]) % self.wpg} of its workgroup"
        when = (
            "has not yet retired (s_waitcnt vmcnt)"
            if own[i]
            else "had not retired (s_waitcnt) before an s_barrier this wave has passed"
        )
        done = "written" if verb == "reads" else "being written"
        self._lds_hazard(
            ex,
            sel,
            "lds-visibility" if verb == "reads" else "lds-waw",
            inst.pc,
            w_pc,
            f"{verb} LDS byte {4 * int(word[i]):#x}, {done} by {who} at pc {w_pc:#x} "
            f"`{self.model.text(w_pc)}`, which it {when}",
            wg=int(self.wave_wg[reader[i]]),
            across_waves=not own[i],
        )

    def lds_write(self, ex, inst, sel, widx: np.ndarray, lanes: np.ndarray, dma: bool) -> None:
        """A DS write or LDS DMA of words widx [n, 64, ndw] by the selected waves.

        Another wave's read of these words must have retired before the last barrier this wave
        passed. A read issued after that barrier is unordered with this write: a hazard. A read
        issued before it but not yet retired (no lgkmcnt wait before the barrier), or this
        wave's own earlier DS read overwritten by its LDS DMA, is served first because the LDS
        takes requests in order and the write arrives later; the ISA does not promise that, so
        it is reported as an advisory ("lds-war-in-flight")."""
        lw = self.lds
        waves = np.arange(self.W)[sel]
        rows = self.wave_wg[waves][:, None, None]
        slot = (self.gen[waves] - 1) % GENERATIONS
        readers = self.first_wave[waves][:, None] + np.arange(self.wpg)  # [n, wpg]
        own = readers == waves[:, None]
        retired = self.snap[LDS, readers, slot[:, None]]
        if dma:
            retired = np.where(own, self.retired[LDS, waves][:, None], retired)
        else:
            retired = np.where(own, NEVER, retired)
        flat = rows * lw.shape[1] + widx  # [n, 64, ndw] into the tags' flat (word) views
        # [n, 64, ndw, wpg]: sequence + 1 of the last read
        rseq1 = lw.r_tag.reshape(-1, self.wpg).take(flat, axis=0)  # take: 7x indexing's speed
        # r_tag is int32: a bound past its range compares alike clipped, and half as wide
        late = rseq1 > np.minimum(retired, I32_MAX).astype(np.int32)[:, None, None, :]
        if not ex.exec_full:
            late &= lanes[..., None, None]
        if late.any():
            issued = np.where(own, NEVER, self.snap_issued[LDS, readers, slot[:, None]])
            unordered = late & (rseq1 > issued[:, None, None, :])
            for bad in self._war_choices(waves, unordered, late):
                self._war(ex, inst, sel, widx, readers, rseq1, bad)
        self._overwrites_dma(ex, inst, sel, waves, rows, flat, widx, lanes, dma)
        local = waves - self.first_wave[waves]
        tag = (((self.seq[waves] + 1) << W_SEQ_SHIFT) | (W_DMA_BIT if dma else 0) | local).astype(
            np.int32
        )
        if ex.exec_full:
            lw.w_tag.reshape(-1)[flat] = tag[:, None, None]
        else:
            m = np.broadcast_to(lanes[..., None], widx.shape)
            r = np.broadcast_to(rows, widx.shape)[m]
            lw.w_tag[r, widx[m]] = np.broadcast_to(tag[:, None, None], widx.shape)[m]

    def _overwrites_dma(self, ex, inst, sel, waves, rows, flat, widx, lanes, dma: bool) -> None:
        """A write to words an LDS DMA may still land on: the DMA's data arrives through the
        vector-memory path, unordered with later LDS writes, until the DMA's wave retires it
        (its vmcnt wait; for another wave, before a barrier this wave has passed). Two DMAs of
        one wave land in issue order (vmcnt is in order), so those are not checked."""
        tag = self.lds.w_tag.reshape(-1)[flat]
        prev_dma = (tag & W_DMA_BIT) != 0
        if not prev_dma.any():
            return
        seq1 = (tag >> W_SEQ_SHIFT).astype(np.int64)
        limit = self._limits(waves)[VM][:, None, None]
        bad = prev_dma & (seq1 > limit)
        if dma:
            local = (waves - self.first_wave[waves])[:, None, None]
            bad &= (tag & W_WAVE_MASK) != local
        if not ex.exec_full:
            bad &= lanes[..., None]
        if bad.any():
            self._too_early_exact(ex, inst, sel, waves, rows, widx, bad, "overwrites")

    def _war(self, ex, inst, sel, widx, readers, rseq1, bad) -> None:
        """Report the first write-after-read in `bad` (unordered: hazard; in flight: advisory)."""
        n_idx, lane, d, j = (int(x[0]) for x in np.nonzero(bad))
        word = int(widx[n_idx, lane, d])
        reader = int(readers[n_idx, j])
        seq = int(rseq1[n_idx, lane, d, j]) - 1
        r_pc = self.logs[LDS].pc(reader, seq)
        slot = (int(self.gen[reader]) - 1) % GENERATIONS
        own = reader == int(np.arange(self.W)[sel][n_idx])
        in_flight = own or seq < int(self.snap_issued[LDS, reader, slot])
        who = "this wave" if own else f"wave {j} of its workgroup"
        if in_flight:
            what = (
                f"overwrites LDS byte {4 * word:#x} that {who} read at pc {r_pc:#x} "
                f"`{self.model.text(r_pc)}`, a read still in flight (no s_waitcnt lgkmcnt "
                "retired it before the barrier); correct only because the LDS serves a read "
                "issued earlier before this write arrives"
            )
        else:
            what = (
                f"overwrites LDS byte {4 * word:#x} that {who} reads at pc {r_pc:#x} "
                f"`{self.model.text(r_pc)}` with no s_barrier between them"
            )
        rule = "lds-war-in-flight" if in_flight else "lds-war"
        wg = int(self.wave_wg[np.arange(self.W)[sel][n_idx]])
        self._lds_hazard(
            ex, sel, rule, inst.pc, r_pc, what, advisory=in_flight, wg=wg, across_waves=not own
        )

    def _lds_hazard(
        self,
        ex,
        sel,
        rule: str,
        pc: int,
        other_pc: int,
        what: str,
        advisory: bool = False,
        wg: int = 0,
        across_waves: bool = False,
    ) -> None:
        """Report an LDS hazard of the waves `sel` (per workgroup: of workgroup `wg`'s there)."""
        kind = "advisory" if advisory else "hazard"
        msg = f"{kind} [{rule}]: pc {pc:#x} `{self.model.text(pc)}` {what}"
        hazard = Hazard(rule, pc, other_pc, msg, advisory, bool(across_waves))
        if self.events is None:
            self.report.add(hazard, ex.where_wave(sel))
            return
        waves = np.arange(self.W)[sel]
        self._report(ex, hazard, waves[self.wave_wg[waves] == wg])

    # --- whom a hazard is reported for -----------------------------------------------------------

    def _report(self, ex, hazard: Hazard, sel) -> None:
        """Report `hazard`, met by the selected waves: once, named by the first of them; or
        (per workgroup) once per workgroup among them, named by its first wave there, which is
        what a run of that workgroup alone reports."""
        if self.events is None:
            self.report.add(hazard, ex.where_wave(sel))
            return
        waves = np.arange(self.W)[sel]
        groups, first = np.unique(self.wave_wg[waves], return_index=True)
        for g, i in zip(groups, first, strict=True):
            self.events.append((int(g), hazard, ex.where_wave(waves[i : i + 1])))

    def _first_per_report(self, bad: np.ndarray, wg: np.ndarray) -> list[int]:
        """Indices of the bad elements to report: the first overall, or (per workgroup) the
        first of each workgroup (`wg`: each element's)."""
        if self.events is None:
            return [int(np.argmax(bad))]
        idx = np.nonzero(bad)[0]
        return [int(i) for i in idx[np.unique(wg[idx], return_index=True)[1]]]

    def _war_choices(self, waves, unordered, late) -> list[np.ndarray]:
        """The write-after-read masks to report from: unordered ones if any, else the late
        ones; per workgroup, that choice for each workgroup's rows."""
        if self.events is None:
            return [unordered if unordered.any() else late]
        row_wg = self.wave_wg[waves]
        out = []
        for g in np.unique(row_wg):
            rows = (row_wg == g)[:, None, None, None]
            mine = unordered & rows
            mine = mine if mine.any() else late & rows
            if mine.any():
                out.append(mine)
        return out
