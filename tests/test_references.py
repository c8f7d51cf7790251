"""Every citation in the code points at something a user has: docs/reference/ pages of this
repository (and the section named exists there), never notes outside it or a tracker they
cannot see."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("f4pipe", "tests", "benchmarks", "scripts", "workflow", "config", "docs")
SUFFIXES = {".py", ".md", ".smk", ".yaml", ".yml", ".toml"}
#: A citation: docs/reference/<page>.md, optionally followed by a section id (A2, B1, C5...).
CITATION = re.compile(r"docs/reference/([\w-]+\.md)(?:,? (?:section )?([A-D]\d*))?")
#: Outside notes no user has, and issue numbers of f4pipe's own tracker.
#: (Spelt in pieces so that this file does not cite what it forbids.)
OUTSIDE_NOTES = ("hazards", "facts", "perf")
FORBIDDEN = re.compile(
    "|".join(rf"{name}\.md" for name in OUTSIDE_NOTES)
    + "|shared/"
    + "reference"
    + "|"
    + r"\b"
    + "issue"
    + r" \d+\b(?!,\d)"
)
#: Issues of other projects, cited with their project's name.
EXTERNAL = re.compile(r"(aiter|rocm-systems|tritonbench|flashinfer)[^.\n]{0,20}issue \d+")


def texts() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Snakefile", ROOT / "noxfile.py"]
    for top in SOURCES:
        files += [p for p in (ROOT / top).rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    return [p for p in files if p.exists() and "reference" not in p.parts]


def test_no_citation_points_outside_the_repository():
    found = []
    for path in texts():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            line = EXTERNAL.sub("", line)
            if FORBIDDEN.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert found == []


def test_every_reference_citation_names_an_existing_page_and_section():
    pages = {p.name: p.read_text() for p in (ROOT / "docs" / "reference").glob("*.md")}
    assert {"timing.md", "aiter.md", "gfx950.md"} <= set(pages)
    cited = 0
    for path in texts():
        for page, section in CITATION.findall(path.read_text(errors="replace")):
            cited += 1
            assert page in pages, f"{path.name} cites docs/reference/{page}, which does not exist"
            if section:
                heading = re.compile(rf"^#+ {section}\.|^- \*\*{section}\.\*\*", re.M)
                assert heading.search(pages[page]), f"{path.name}: no section {section} in {page}"
    assert cited >= 20
