"""The hand-edit loop in the engineer's terms : every command that points into a
kernel names the `.s` line, one static verdict in `try`, its `.diff.txt`, `asmdiff`, `hazards`
and `waits`, the next step named, what the model cannot see said, shapes and kernel names
judged alike everywhere. Real kernels, real LLVM, the emulator; edits made here from co2asm."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from asm_edits import EDITED_KERNEL, edited

from f4pipe.cli import main

#: The main loop's first wait; dropping it is the issue's example edit.
LOOP_WAIT = "\ts_waitcnt vmcnt(12) lgkmcnt(5)\n"
#: A located finding: FILE.s:LINE (pc 0x...) `the instruction's text`.
LOCATED = re.compile(r"(?P<file>\S+\.s):(?P<line>\d+) \(pc 0x[0-9a-f]+\) `(?P<text>[^`]*)`")


@pytest.fixture
def nowait(tmp_path, base_asm) -> Path:
    """The 32x128 kernel with its main loop's first s_waitcnt dropped."""
    text = base_asm.replace(LOOP_WAIT, "", 1)
    assert text != base_asm
    path = tmp_path / "nowait.s"
    path.write_text(text)
    return path


def run(capsys, *argv: str) -> tuple[int, list[str], str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def first_located(lines: list[str]) -> re.Match:
    return next(m for line in lines if (m := LOCATED.search(line)))


def test_one_dropped_wait_names_the_same_line_and_exit_in_every_command(
    nowait, tmp_path, base_asm, toolchain, f4gemm_dir, capsys
):
    tools = ["--toolchain-bin", str(toolchain.bin_dir)]
    co_dir = ["--co-dir", str(f4gemm_dir)]
    original = tmp_path / "k32.s"
    original.write_text(base_asm)

    code, hazards, _ = run(capsys, "hazards", str(nowait), *tools)
    assert code == 1
    first = first_located(hazards)
    # the line it names holds the instruction it quotes
    assert nowait.read_text().splitlines()[int(first["line"]) - 1].strip() == first["text"]
    place = f"{nowait}:{first['line']}"

    code, tried, _ = run(capsys, "try", str(nowait), *co_dir, "--device", "emulator", *tools)
    assert code == 1
    assert any(place in line for line in tried if line.startswith("  hazard"))
    assert tried[-1].startswith(f"next:   f4pipe waits {nowait} --apply -o ")
    assert str(nowait.with_suffix(".fixed.s")) in tried[-1]
    # three counts, one line saying what each answers
    (counts,) = [line for line in tried if line.startswith("counts:")]
    assert "first use that needs the counter" in counts
    assert "first value seen to arrive late" in counts
    assert "`s_waitcnt vmcnt(12)`, `s_waitcnt lgkmcnt(5)`" in counts

    out = tmp_path / "asmdiff.txt"
    code, diffed, _ = run(capsys, "asmdiff", str(original), str(nowait), "-o", str(out), *tools)
    assert code == 1
    assert diffed[0].startswith(f"original: {original} (") and EDITED_KERNEL in diffed[0]
    assert out.read_text().splitlines() == diffed
    assert any(place in line for line in diffed)

    code, waits, _ = run(capsys, "waits", str(nowait), *co_dir, *tools)
    assert code == 1
    assert any(place in line for line in waits if line.startswith("  hazard"))

    # one verdict: try's .diff.txt has asmdiff's static section, and try's console its start
    written = nowait.with_suffix(".diff.txt").read_text().splitlines()
    static = written[next(i for i, s in enumerate(written) if s.startswith("static checks")) :]
    assert diffed[-len(static) :] == static
    console = tried[next(i for i, s in enumerate(tried) if s.startswith("static checks")) :]
    shown = [s for s in console[1:] if s.startswith("  hazard")]
    assert console[0] == static[0] and shown == static[1 : 1 + len(shown)]
    # and the same findings hazards lists, in its order
    assert [s.strip() for s in static[1:]] == [s.strip() for s in hazards[1:]]


def test_waits_keeps_the_advice_a_missing_wait_leaves_alone_and_says_what_it_dropped(
    nowait, f4gemm_dir, toolchain, capsys
):
    """11 s_waitcnt remain; the one before the dropped wait and two whose uses the dropped
    wait guarded are sized for its work, so their advice is dropped, saying so; the rest is
    printed. Before, every wait's advice was dropped silently ("0 s_waitcnt")."""
    tools = ["--toolchain-bin", str(toolchain.bin_dir), "--co-dir", str(f4gemm_dir)]
    code, lines, _ = run(capsys, "waits", str(nowait), *tools)
    assert code == 1
    head = lines[0]
    kept = int(re.search(r"advice for (\d+) s_waitcnt", head)[1])
    dropped = int(re.search(r"advice for (\d+) more dropped", head)[1])
    assert kept + dropped == nowait.read_text().count("s_waitcnt") and 0 < dropped < kept
    advised = [s for s in lines if re.match(r"  \S+\.s:\d+ \(pc 0x[0-9a-f]+\) `s_waitcnt", s)]
    assert len(advised) == kept
    assert any(s.startswith(f"next:   f4pipe waits {nowait} --apply -o ") for s in lines)


def test_apply_comments_are_whole_sentences(nowait, tmp_path, f4gemm_dir, toolchain, capsys):
    fixed = tmp_path / "fixed.s"
    argv = ["waits", str(nowait), "--apply", "-o", str(fixed), "--co-dir", str(f4gemm_dir)]
    code, lines, _ = run(capsys, *argv, "--toolchain-bin", str(toolchain.bin_dir))
    assert code == 0
    mark = "// f4pipe waits: inserted: "
    comments = [s.split(mark, 1)[1] for s in fixed.read_text().splitlines() if mark in s]
    assert len(comments) == 2
    for c in comments:
        assert c.endswith(".") and c.count("(") == c.count(")") and "`" not in c, c
    assert any(f"before {nowait}:" in s for s in lines)


def test_a_co_finding_names_pc_and_label_and_pc_comments_find_it_in_the_s(
    nowait, tmp_path, toolchain, capsys
):
    tools = ["--toolchain-bin", str(toolchain.bin_dir)]
    co = tmp_path / "nowait.co"
    assert main(["assemble", str(nowait), "-o", str(co), *tools]) == 0
    capsys.readouterr()
    code, lines, _ = run(capsys, "hazards", str(co), *tools)
    assert code == 1
    m = re.search(r"pc (0x[0-9a-f]+) \((label_\w+)(\+0x[0-9a-f]+)?\) `([^`]*)`", lines[1])
    assert m is not None, lines[1]
    commented = tmp_path / "commented.s"
    assert main(["co2asm", str(co), "-o", str(commented), "--pc-comments", *tools]) == 0
    capsys.readouterr()
    (line,) = [s for s in commented.read_text().splitlines() if s.endswith(f"// pc {m[1]}")]
    assert line.split("//")[0].strip() == m[4]
    # the commented .s is the same kernel: hazards names that line in it
    code, again, _ = run(capsys, "hazards", str(commented), *tools)
    number = commented.read_text().splitlines().index(line) + 1
    assert code == 1 and f"{commented}:{number} (pc {m[1]})" in again[1]


def test_try_says_the_model_does_not_see_an_occupancy_change(
    tmp_path, base_asm, toolchain, f4gemm_dir, capsys
):
    """Half the LDS, fitted: 1 -> 2 workgroups per CU, which the cycle model (one workgroup's
    waves on a CU) cannot see; the speed line says so instead of "+0.0 %"."""
    asm = tmp_path / "half_lds.s"
    asm.write_text(
        edited(
            base_asm,
            ".amdhsa_group_segment_fixed_size 163840",
            ".amdhsa_group_segment_fixed_size 81920",
        )
    )
    argv = ["try", str(asm), "--fit-resources", "--co-dir", str(f4gemm_dir), "--device", "emulator"]
    code, lines, _ = run(capsys, *argv, "--toolchain-bin", str(toolchain.bin_dir))
    assert code == 0
    (speed,) = [s for s in lines if s.startswith("speed:")]
    assert "does not see occupancy" in speed and "1 -> 2 workgroups per CU" in speed
    assert "%" not in speed


def test_audit_tuned_refuses_a_shape_in_predicts_words(f4gemm_dir, capsys):
    co_dir = ["--co-dir", str(f4gemm_dir)]
    code, _, audit = run(capsys, "audit-tuned", *co_dir, "--shape", "64,1024,100")
    assert code == 2
    code, _, predict = run(capsys, "predict", *co_dir, "-m", "64", "-n", "1024", "-k", "100")
    assert code == 2
    said = audit.strip().split(": error: ", 1)[1]
    assert said == predict.strip().split(": error: ", 1)[1]
    assert "K=100 is not a multiple of 64" in said and "use K=128" in said


def test_a_kernel_name_that_misses_gets_the_closest_names(f4gemm_dir, capsys):
    argv = ["predict", "--co-dir", str(f4gemm_dir), "-m", "64", "-n", "1024", "-k", "128"]
    code, _, err = run(capsys, *argv, "--kernel", "32x129")
    assert code == 2
    assert "did you mean 32x128 or" in err
