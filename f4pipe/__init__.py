"""f4pipe: round-trip, verify and benchmark aiter's gfx950 MXFP4 GEMM code objects."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("f4pipe")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
