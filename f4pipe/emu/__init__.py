"""gfx950 functional emulator: runs f4gemm code objects on the CPU as a Device, checking the
timing (memory counters, LDS visibility, wait states) that its own legal schedule hides.
What it models exactly, as a schedule, or refuses: fidelity.py.

`EmulatorDevice` implements f4pipe.core.device.Device; its launches return LaunchStats. The
pieces: isa.py (formats, field layouts, opcode tables), decode.py (machine code from the code
object's .text, driven by those tables), disasm.py (LLVM's spelling, for traces and the llvm-objdump
cross-check), program.py (kernel entry and launch settings from the descriptor), engine.py (register
state, lockstep scheduler), ops_scalar/ops_vector/ops_memory/ops_mfma.py (instruction semantics),
handlers.py (the table from operation name to the function that runs it), memory.py (global memory),
effects.py / timing.py / waitstates.py / hazards.py (the timing model, its rule table and the static
check), trace.py, device.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from f4pipe.emu.batch import SharedRuns
    from f4pipe.emu.device import EmulatorDevice, EmulatorKernel
    from f4pipe.emu.launching import LaunchFault, LaunchStats

__all__ = ["EmulatorDevice", "EmulatorKernel", "LaunchFault", "LaunchStats", "SharedRuns"]


def __getattr__(name: str) -> Any:
    """The device's names, imported on first use: a process that only decodes (the workflow's
    parse, a stage job answered from the result store) does not load the engine, its MFMA
    tables or ml_dtypes (about 2 s)."""
    if name in __all__:
        from f4pipe.emu import device

        return getattr(device, name)  # the device module imports each of them
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
