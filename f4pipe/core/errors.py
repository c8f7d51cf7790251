"""One error hierarchy for f4pipe.

Every failure a user can cause or meet (bad input, missing tool, no device) is an F4PipeError
whose message names the offending thing and what to do. The CLI turns these into a one-line
message and exit code 2; anything else is a bug: exit 3, with the traceback under --debug.
"""


class F4PipeError(Exception):
    """Base of all f4pipe errors; the message is shown to the user as is."""


class InputError(F4PipeError):
    """A file or value given to f4pipe is missing, malformed or of the wrong kind."""


class CodeObjectError(InputError):
    """A code object is not a readable AMDGPU ELF (truncated, corrupt, wrong arch)."""


class ManifestError(InputError):
    """The f4gemm manifest CSV is malformed or lists a code object that is not there."""


class ConfigError(InputError):
    """The pipeline configuration is invalid."""


class ShapeError(InputError):
    """A GEMM shape violates a kernel's constraints (K % 256, N % 16, split count)."""


class FetchError(F4PipeError):
    """The aiter source could not be fetched."""


class ChecksumError(FetchError):
    """A pinned file's bytes changed: never silently refetched."""


class ToolchainError(F4PipeError):
    """No LLVM toolchain that knows gfx950 could be found or provisioned, or a tool failed."""


class DeviceError(F4PipeError):
    """A launch device failed (HIP error, emulator fault)."""


class NoDeviceError(DeviceError):
    """The requested device is not available (no HIP runtime, no gfx950 GPU)."""


class HipVersionError(NoDeviceError):
    """hip-python and the HIP runtime belong to different ROCm releases. A setup error to fix,
    so `device: auto` reports it instead of falling back to the emulator."""


class EmulatorError(DeviceError):
    """The gfx950 emulator met an instruction or access it cannot execute faithfully."""
