"""What an instruction handler may see of the waves it executes: a typing Protocol.

The handlers (ops_scalar, ops_vector, ops_memory, ops_mfma) are written against WaveState, not
against the scheduler that calls them (f4pipe.emu.engine.Executor), so that the instruction
semantics and the step loop are separate floors: a handler reads and writes register files,
LDS and global memory through the members below and never imports the engine (an
import-linter contract in pyproject.toml, and tests/test_emu_state.py, keep it so). Executor
satisfies the protocol structurally; the test holds the members declared here against the
attributes a live Executor has, and against those the handlers use, so this list is exactly
what handlers need. Nothing here runs: it is a type, and the handlers' speed is the engine's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from f4pipe.analysis.timingrun import TimingRun
    from f4pipe.arch.decode import Instruction, Operand
    from f4pipe.core.errors import EmulatorError
    from f4pipe.emu.memory import GlobalMemory

#: The waves of a batch one step executes: all of them (a slice) or their indices.
Sel = slice | np.ndarray


class WaveState(Protocol):
    """One batch of waves as a handler sees it: register files shaped [registers, waves,
    (lanes)], per-wave control state, the workgroups' LDS, global memory and the timing
    model's hooks."""

    # --- register files and per-wave state ----------------------------------------------
    W: int  # waves in the batch
    sgpr: np.ndarray  # uint32 [128, W]
    vgpr: np.ndarray  # uint32 [512, W, 64]: v0..v255, then a0..a255
    scc: np.ndarray  # uint32 [W]
    pc: np.ndarray  # int64 [W]
    done: np.ndarray  # bool [W]: executed s_endpgm
    at_barrier: np.ndarray  # bool [W]: waits at s_barrier
    gpr_idx_en: np.ndarray  # bool [W]: s_set_gpr_idx_on in force
    gpr_idx_active: bool  # some wave has GPR indexing on
    exec_full: bool  # EXEC is all ones in every wave
    flush_denorms: bool  # the kernel's f32 denormal mode flushes
    wg: np.ndarray  # [W] each wave's workgroup within the batch
    wg_writer: np.ndarray  # [workgroups] what its stores carry: launch-order number, or a
    # tag unique across the launches of a batch (f4pipe.emu.colaunch)
    lds: np.ndarray  # uint32 [workgroups, LDS words]
    memory: GlobalMemory
    timing: TimingRun | None  # the timing model's hooks, None when hazards are not checked
    memo: dict[str, dict]  # handlers' own caches for the batch, each under its own name

    # --- operand access -------------------------------------------------------------------
    def nsel(self, sel: Sel) -> int: ...

    def access_owners(
        self, sel: Sel, shape: tuple[int, ...], ok: np.ndarray | None = None
    ) -> np.ndarray | None: ...

    def s(self, op: Operand, sel: Sel) -> np.ndarray: ...

    def s64(self, op: Operand, sel: Sel) -> np.ndarray: ...

    def set_s(self, code: int, sel: Sel, value) -> None: ...

    def v(self, op: Operand, sel: Sel, idx: int = 0) -> np.ndarray: ...

    def vregs(self, op: Operand, sel: Sel) -> np.ndarray: ...

    def reg_index(self, op: Operand, idx: int = 0) -> int: ...

    def set_v(self, reg: int, sel: Sel, value) -> None: ...

    def lane_mask(self, sel: Sel) -> np.ndarray: ...

    def vcc_mask(self, code: int, sel: Sel) -> np.ndarray: ...

    def set_mask(self, code: int, sel: Sel, mask: np.ndarray) -> None: ...

    def gpr_index(self, inst: Instruction, sel: Sel) -> tuple[int, int, int, int] | None: ...

    # --- errors -------------------------------------------------------------------------
    def error(self, inst: Instruction, sel: Sel, what: str) -> EmulatorError: ...
