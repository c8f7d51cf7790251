"""What `f4pipe try` computes of the unedited original, kept between commands.

An engineer iterating on a hand edit runs `try` again and again against the same original: its
emulated output at try's shapes (for the bit-identity line) and its static timing findings (the
edit is judged on the findings it adds) are the same every time, yet were half of a repeated
`try` on the large tiles. They are kept under f4pipe's cache, keyed by exactly what they were
computed from: the original's bytes (sha256) and symbol, the launch request (shape, split,
seeds, operand distribution, edge policy), and f4pipe's own source (`f4pipe_identity`: a
development checkout never reads what other code computed). Only emulator outputs are kept: a
GPU's output is what a run on it is there to observe. Entries of another f4pipe source are
removed when a new one is written, so the cache holds one version's entries (about 130 KB per
kernel and shape).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from f4pipe.core.cache import version_dir, write_versioned
from f4pipe.core.fsio import sha256_file
from f4pipe.pipeline.resultstore import plain

ROOT_NAME = "try-baseline"


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(plain(parts), sort_keys=True).encode()).hexdigest()


def _entry(kind: str, key: str, suffix: str) -> Path:
    return version_dir(ROOT_NAME) / kind / f"{key}{suffix}"


def _output_entry(co_path: Path, symbol: str, request: Any) -> Path:
    return _entry("output", _key(sha256_file(co_path), symbol, request), ".npy")


def has_original_output(co_path: Path, symbol: str, request: Any) -> bool:
    """Whether the original's emulated D at `request` is kept."""
    return _output_entry(co_path, symbol, request).is_file()


def original_output(
    co_path: Path, symbol: str, request: Any, compute: Callable[[], np.ndarray]
) -> np.ndarray:
    """The original's emulated D at `request` (a GemmRequest): from the cache, or computed by
    `compute` and kept."""
    path = _output_entry(co_path, symbol, request)
    if path.is_file():
        return np.load(path, allow_pickle=False)
    d = compute()
    buffer = io.BytesIO()
    np.save(buffer, d, allow_pickle=False)
    write_versioned(path, buffer.getvalue())
    return d


Finding = tuple[tuple[str, str, str], str]


def original_findings(
    co_path: Path, symbol: str, compute: Callable[[], list[Finding]]
) -> list[Finding]:
    """The original's static timing findings (rule and instruction texts, message), cached."""
    path = _entry("findings", _key(sha256_file(co_path), symbol), ".json")
    if path.is_file():
        return [(tuple(key), message) for key, message in json.loads(path.read_text())]
    findings = compute()
    write_versioned(path, json.dumps(findings).encode())
    return findings
