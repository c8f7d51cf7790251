"""Progress lines for long stages: "label: done/total (rate/s, ETA)", plain text for logs.

Snakemake writes each job's stderr to a log file, and a cluster executor shows it long after the
fact, so progress is a plain line at most every `interval` seconds (default 2) plus one final
line, never a redrawn terminal bar. Usage:

    with Progress(len(kernels), "roundtrip") as progress:
        for kernel in progress.wrap(kernels):
            ...

or `progress.advance()` after each unit of work (thread-safe, so a pool's callbacks may call it).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import IO, TypeVar

T = TypeVar("T")

DEFAULT_INTERVAL_S = 2.0


def format_duration(seconds: float) -> str:
    """Compact, log-friendly durations: 7s, 2m05s, 1h02m."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_rate(rate: float) -> str:
    """Three significant digits are plenty for a throughput a person glances at."""
    if rate >= 100:
        return f"{rate:.0f}"
    if rate >= 10:
        return f"{rate:.1f}"
    return f"{rate:.2f}"


class Progress:
    """Counts finished units of work and prints a rate-limited progress line to `stream`.

    `total` may be None when the amount of work is unknown (then no ETA is shown). `clock` is
    injectable so tests can drive time deterministically.
    """

    def __init__(
        self,
        total: int | None,
        label: str,
        stream: IO[str] | None = None,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total is not None and total < 0:
            raise ValueError(f"Progress total must be >= 0 or None, got {total}")
        self.total = total
        self.label = label
        # Resolved at call time, not import time, so pytest's capsys and redirects see it.
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.clock = clock
        self.done = 0
        self.start = clock()
        self._last_print = self.start
        self._finished = False
        self._lock = threading.Lock()

    # -- counting ---------------------------------------------------------------------------

    def advance(self, n: int = 1) -> None:
        """Record `n` more finished units; print a line if `interval` has passed."""
        with self._lock:
            self.done += n
            now = self.clock()
            if now - self._last_print >= self.interval:
                self._last_print = now
                self._print(self.line(now))

    def wrap(self, iterable: Iterable[T]) -> Iterator[T]:
        """Yield the items of `iterable`, counting each one as done once the caller is back."""
        for item in iterable:
            yield item
            self.advance()

    def finish(self) -> None:
        """Print the final line once (the context manager calls this)."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            self._print(self.line(self.clock(), final=True))

    # -- formatting -------------------------------------------------------------------------

    def line(self, now: float, *, final: bool = False) -> str:
        elapsed = max(now - self.start, 0.0)
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        rate = self.done / elapsed if elapsed > 0 else 0.0
        parts = [f"{format_rate(rate)}/s"]
        if final:
            parts.append(f"{format_duration(elapsed)} total")
        elif self.total is not None and self.done > 0 and rate > 0:
            parts.append(f"ETA {format_duration(max(self.total - self.done, 0) / rate)}")
        else:
            parts.append("ETA ?")
        return f"{self.label}: {count} ({', '.join(parts)})"

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    # -- context manager --------------------------------------------------------------------

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish()


def track(
    iterable: Iterable[T],
    label: str,
    total: int | None = None,
    stream: IO[str] | None = None,
    *,
    interval: float = DEFAULT_INTERVAL_S,
) -> Iterator[T]:
    """`for x in track(items, "verify"): ...`: progress over any iterable, final line included."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with Progress(total, label, stream, interval=interval) as progress:
        yield from progress.wrap(iterable)
