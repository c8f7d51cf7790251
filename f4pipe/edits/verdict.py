"""One static analysis of an edit and one wording of its verdict, for `try`, its `.diff.txt` and
`asmdiff`: the descriptor checks (f4pipe.edits.checks) and, over every path, the timing
analysis `hazards` and `waits` run (f4pipe.analysis.hazards), as far as the edit adds to its
original's findings. Every finding names its place through one Locator
(f4pipe.codeobj.sourcemap), so the same bytes print the same lines wherever they are checked.

What the numbers a finding, an emulated run and a repair name answer differs, and
`counts_legend` says so in one line: the static check names the first use that needs a
counter, the emulated run the first value it saw arrive late in one schedule, and
`waits --apply` the loosest wait that covers every use.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from f4pipe.codeobj.sourcemap import Locator
from f4pipe.edits.checks import Finding

#: A timing finding's key: its rule and the texts of its two instructions (an edit moves pcs).
FindingKey = tuple[str, str, str]
_NEEDS = re.compile(r"needs s_waitcnt (?P<count>(?:vmcnt|lgkmcnt)\(\d+\))")


def timing_findings(co_path: Path, symbol: str) -> list[tuple[FindingKey, str]]:
    """Every static timing finding of one kernel over all paths, in `f4pipe hazards`' order,
    each with the key that matches it across an edit."""
    from f4pipe.analysis.hazards import analyse
    from f4pipe.arch.disasm import format_instruction
    from f4pipe.codeobj.program import Program

    program = Program.load(co_path, symbol)
    report = analyse(program)
    out = []
    for f in (*report.wait_states, *report.counters):
        h = f.hazard
        a, b = (format_instruction(program.at(pc), {}) for pc in (h.producer_pc, h.consumer_pc))
        out.append(((h.rule, a, b), h.message))
    return out


def new_timing_findings(
    edit: list[tuple[FindingKey, str]], original: list[tuple[FindingKey, str]]
) -> list[str]:
    """The edit's findings less its original's, one original finding cancelling one edit
    finding, so every finding the edit adds is listed (all of them when the original has
    none, as every shipped kernel)."""
    left = Counter(key for key, _ in original)
    new = []
    for key, message in edit:
        if left[key]:
            left[key] -= 1
        else:
            new.append(message)
    return new


@dataclass(frozen=True)
class StaticVerdict:
    """The static verdict of one edit: descriptor findings and new timing findings (raw
    messages; rendered through `where`). Timing is checked only once the descriptor holds."""

    descriptor: tuple[Finding, ...]
    timing: tuple[str, ...]
    where: Locator
    timing_skipped: str = ""  # why timing was not checked ('' : it was, or the descriptor failed)

    @property
    def count(self) -> int:
        return len(self.descriptor) + len(self.timing)

    def summary(self) -> str:
        """The verdict in one line, the same in every command that prints it."""
        if self.descriptor:
            return (
                f"static checks: {len(self.descriptor)} finding(s) against the descriptor; "
                "timing not checked until the descriptor holds"
            )
        if self.timing_skipped:
            return f"static checks: descriptor ok; timing not checked ({self.timing_skipped})"
        if not self.timing:
            return (
                "static checks: ok (descriptor; timing over every path: nothing the original lacks)"
            )
        return (
            f"static checks: descriptor ok; timing over every path: {len(self.timing)} "
            "finding(s) the original does not have"
        )

    def findings(self) -> list[str]:
        """Every finding, located: descriptor ones first, then timing in `hazards`' order."""
        return [f.render() for f in self.descriptor] + [self.where.locate(m) for m in self.timing]

    def text(self, limit: int | None = None) -> str:
        """The summary line and the findings (at most `limit`, then how many more)."""
        found = self.findings()
        shown = found if limit is None else found[:limit]
        lines = [self.summary(), *(f"  {f}" for f in shown)]
        if len(shown) < len(found):
            lines.append(f"  ... {len(found) - len(shown)} more")
        return "\n".join(lines) + "\n"


def first_count(messages: list[str]) -> str:
    """The counter and count the first of `messages` says a wait needs ('' if none does)."""
    for m in messages:
        found = _NEEDS.search(m)
        if found:
            return found.group("count")
    return ""


def counts_legend(static: str, emulated: str, repair: str) -> str:
    """One line saying what each number answers, when they differ (else '')."""
    named = [n for n in (static, emulated, repair) if n]
    if len(set(named)) < 2:
        return ""
    parts = []
    if static:
        parts.append(f"static `{static}` is the first use that needs the counter (every path)")
    if emulated:
        parts.append(f"emulated `{emulated}` is the first value seen to arrive late (one schedule)")
    if repair:
        parts.append(f"`waits --apply` inserts `{repair}`: the loosest wait that covers every use")
    return "counts: " + "; ".join(parts)
