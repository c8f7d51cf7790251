"""The bench timing protocol and its defaults, one place for each (the statistics are
f4pipe.host.benchstats). Standard library only: `f4pipe bench --help` shows these defaults
without importing numpy, and the config schema's descriptions are checked against them
(tests/test_layout.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: Timed launches per case (config `bench: iters`, `f4pipe bench --iters`).
BENCH_ITERS = 100
#: Bytes of operand copies cold mode rotates through: more than the L2s (8 x 4 MiB) and the
#: Infinity Cache (256 MiB) of an MI355X together.
COLD_ROTATE_BYTES = 288 << 20


@dataclass(frozen=True)
class Protocol:
    """How a row was timed (recorded per row as `describe()`)."""

    warmup: int = 10  # at least this many untimed launches
    warmup_ms: float = 50.0  # ... and at least this long
    repeats: int = 5
    launches: int = 20  # timed launches per repeat, one event pair each
    cold: bool = True  # rotate operand copies (rotate_bytes in all) between launches
    rotate_bytes: int = COLD_ROTATE_BYTES

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.launches < 1 or self.warmup < 0 or self.warmup_ms < 0:
            raise ValueError(f"bench protocol needs repeats, launches >= 1: {self}")

    @property
    def samples(self) -> int:
        return self.repeats * self.launches

    def describe(self) -> str:
        cache = f"cold (rotating {self.rotate_bytes >> 20} MiB of operands)" if self.cold else "hot"
        return (
            f"{self.repeats}x{self.launches} launches, one event pair each, after "
            f">= {self.warmup} launches and >= {self.warmup_ms:g} ms of warm-up; {cache}; "
            "median, IQR, 95 % order-statistic CI of the median; Tukey outliers counted, kept"
        )

    def to_json(self) -> dict:
        return asdict(self)
