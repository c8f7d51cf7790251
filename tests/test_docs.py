"""Every cross-reference in the docs resolves: each relative Markdown link names a file that
exists and, with `#anchor`, a heading of that file (GitHub's anchor for it); each `docs/...md`
or `research/...md` path that a config comment, a rule or a docstring names exists, with its
anchor. A moved section or a renamed file fails here, not in a reader's browser."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        ROOT / "research" / "README.md",
        *(ROOT / "docs").rglob("*.md"),
    ]
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
NAMED = re.compile(r"\b((?:docs|research)/(?:[\w-]+/)*[\w-]+\.md)(#[\w-]+)?")
#: Another repository's page, as the text before it says ("ROCm/<repo>, docs/<page>.md", "their
#: docs/<page>.md"): not this repository's to check.
EXTERNAL = re.compile(r"(\bROCm/[\w.-]+|\btheir|\btutorial's)\b[^.]{0,80}$")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]{1,2}(.+?)[`*_]{1,2}", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {anchor(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def check(target: str, base: Path) -> str | None:
    """Why `target` (relative to `base`) does not resolve, or None."""
    path, _, fragment = target.partition("#")
    page = (base / path).resolve() if path else None
    if page is not None and not page.exists():
        return f"{target}: no such file"
    if fragment and page is not None and page.suffix == ".md" and fragment not in anchors(page):
        return f"{target}: {page.relative_to(ROOT)} has no heading #{fragment}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_of_a_page_resolves(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    targets = [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]
    broken = [
        why for t in targets if (why := check(t if t[0] != "#" else page.name + t, page.parent))
    ]
    assert broken == []


def test_every_docs_path_named_outside_the_docs_resolves() -> None:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    sources = [
        ROOT / f
        for f in listed.split()
        if f.endswith((".py", ".smk", ".yaml", ".toml", ".c")) or f == "Snakefile"
    ]
    broken = []
    for source in sources:
        text = source.read_text()
        for m in NAMED.finditer(text):
            if EXTERNAL.search(text[max(0, m.start() - 120) : m.start()]):
                continue
            why = check(m[1] + (m[2] or ""), ROOT)
            if why:
                broken.append(f"{source.relative_to(ROOT)}: {why}")
    assert broken == []


def test_anchors_follow_github() -> None:
    assert anchor("What aiter runs for your model") == "what-aiter-runs-for-your-model"
    assert anchor("The tuned table's history") == "the-tuned-tables-history"
    assert anchor("Resources that follow the edit: `--fit-resources`") == (
        "resources-that-follow-the-edit---fit-resources"
    )
