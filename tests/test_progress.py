"""Progress lines: rate-limited, plain, with rate and ETA, and a final line."""

from __future__ import annotations

import io
import threading

from f4pipe.pipeline.progress import Progress, format_duration, track


class Clock:
    """A clock the test moves by hand, so the rate-limit is tested without sleeping."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lines_are_rate_limited_and_end_with_a_total():
    out, clock = io.StringIO(), Clock()
    with Progress(10, "roundtrip", out, interval=2.0, clock=clock) as p:
        for _ in range(10):
            clock.now += 0.5  # one unit every 0.5 s: a line every 4 units
            p.advance()
    lines = out.getvalue().splitlines()
    assert lines == [
        "roundtrip: 4/10 (2.00/s, ETA 3s)",
        "roundtrip: 8/10 (2.00/s, ETA 1s)",
        "roundtrip: 10/10 (2.00/s, 5s total)",
    ]


def test_wrap_counts_items_after_the_caller_is_done_with_them():
    out, clock = io.StringIO(), Clock()
    p = Progress(3, "verify", out, interval=0.0, clock=clock)
    seen = []
    for item in p.wrap("abc"):
        seen.append((item, p.done))
        clock.now += 1
    p.finish()
    p.finish()  # idempotent: one final line
    assert seen == [("a", 0), ("b", 1), ("c", 2)]
    assert out.getvalue().splitlines()[-1] == "verify: 3/3 (1.00/s, 3s total)"
    assert out.getvalue().count("total") == 1


def test_unknown_total_and_final_line_on_error():
    out, clock = io.StringIO(), Clock()
    try:
        with Progress(None, "fetch", out, clock=clock) as p:
            clock.now += 4
            p.advance(2)
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert out.getvalue().splitlines() == [
        "fetch: 2 (0.50/s, ETA ?)",
        "fetch: 2 (0.50/s, 4s total)",
    ]


def test_track_takes_len_and_defaults_to_stderr(capsys):
    assert list(track([1, 2, 3], "bench")) == [1, 2, 3]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("bench: 3/3 (") and err[0].endswith(" total)")


def test_threads_may_advance_concurrently():
    p = Progress(4000, "pool", io.StringIO(), interval=1e9)
    workers = [
        threading.Thread(target=lambda: [p.advance() for _ in range(1000)]) for _ in range(4)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert p.done == 4000


def test_durations():
    assert [format_duration(s) for s in (0, 7.4, 125, 3720)] == ["0s", "7s", "2m05s", "1h02m"]
