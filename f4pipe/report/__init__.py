"""The report of one artifact set: results/<aiter_id>/report/{index.html, summary.md, *.png}.

One page answers "are the rebuilt kernels the originals?": the round-trip verdict per code
object, the verification matrix (original and rebuilt side by side), splitK error against the
seed's MI355X numbers, and throughput when gfx950 hardware measured it. A stage that did not run,
or ran without a device, is shown as such ("not run", "not measured: no gfx950 device"): the
report draws only numbers that a stage recorded, never a placeholder value.

The parts: f4pipe.pipeline.resultset reads the set (also for f4pipe.pipeline.archive and
f4pipe.compare),
`sections` turns it into Sections (`sections.SECTIONS` is the page's list: a new section is one
function added there; `changes` reads the changes step's record for the first card), `plots`
draws the PNGs and `render` writes HTML and markdown. The HTML
has no script and no external resource except the PNG plots beside it, so it opens from a file,
an archive or a Snakemake report alike. The plots `snakemake --report` carries beside the page
always exist (write_absent_plots).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from f4pipe import __version__
from f4pipe.codeobj.toolchain import portable, portable_path
from f4pipe.core.fsio import atomic_dir, read_json_file, sha256_file
from f4pipe.core.layout import (
    ARCH_TABLES,
    CHANGES_JSON,
    REPORT_DIR,
    TABLES,
    arch_table_file,
    table_file,
)
from f4pipe.pipeline.resultset import ResultSet, find_aiter_provenance
from f4pipe.report import sections
from f4pipe.report.changes import ChangesRecord, changes_section, read_changes
from f4pipe.report.plots import HEATMAP_PNG, SPLITK_PNG, THROUGHPUT_PNG, plot_nothing
from f4pipe.report.render import Section, render_html, render_markdown


def config_hash(config: Path | None) -> str:
    return sha256_file(config) if config is not None else "not given"


def build_date() -> str:
    """UTC now, or SOURCE_DATE_EPOCH when set (reproducible builds' convention)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    moment = datetime.fromtimestamp(int(epoch), UTC) if epoch else datetime.now(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def provenance(
    rs: ResultSet, config: Path | None, aiter_provenance: Path | None
) -> list[tuple[str, str]]:
    tc = rs.toolchain or {}
    items = [
        ("aiter id", rs.aiter_id),
        (
            "toolchain",
            f"{rs.toolchain_id} ({tc.get('vendor', '?')}, "
            f"{portable_path(str(tc.get('bin_dir', '?')))})",
        ),
        ("device", rs.device_id),
        ("f4pipe version (rows)", ", ".join(rs.f4pipe_versions) or "-"),
        ("f4pipe version (report)", __version__),
        ("date", build_date()),
        ("config sha256", config_hash(config)),
    ]
    if aiter_provenance is not None:
        prov = read_json_file(aiter_provenance, "provenance.json")
        prov = prov if isinstance(prov, dict) else {}
        source = portable(prov.get("source", "?"))
        items.append(("aiter source", json.dumps(source, sort_keys=True)))
        items.append(("aiter content sha256", str(prov.get("content_sha256", "?"))))
    else:
        items.append(("aiter source", "provenance.json not found"))
    for name in TABLES:
        file_name = table_file(name)
        path = rs.directory / file_name
        items.append((file_name, sha256_file(path) if path.is_file() else f"absent ({name})"))
    for arch in rs.arch_tables:
        for name in ARCH_TABLES:
            path = rs.directory / arch_table_file(arch, name)
            if path.is_file():
                items.append((arch_table_file(arch, name), sha256_file(path)))
    return items


@dataclass(frozen=True)
class Report:
    directory: Path
    index: Path
    summary: Path
    plots: tuple[Path, ...]
    sections: tuple[Section, ...]


def build_sections(
    rs: ResultSet, out_dir: Path | None, changes: ChangesRecord | None = None
) -> list[Section]:
    """What changed since the archived set before (from the changes step's record, not from
    the set's tables), then every section of sections.SECTIONS in order; plots are written to
    `out_dir`."""
    return [changes_section(changes), *(build(rs, out_dir) for build in sections.SECTIONS)]


def find_changes(rs: ResultSet, changes: Path | None) -> ChangesRecord | None:
    """The changes step's record: the file given (which must exist), else the set's own
    changes.json if the pipeline wrote one, else None (a report built by hand)."""
    if changes is not None:
        return read_changes(changes)
    beside = rs.directory / CHANGES_JSON
    return read_changes(beside) if beside.is_file() else None


#: The plots the Snakemake report carries, with the section that draws each.
SNAKEMAKE_PLOTS = {THROUGHPUT_PNG: "bench", HEATMAP_PNG: "safety", SPLITK_PNG: "splitk"}


def write_absent_plots(out_dir: Path, built: list[Section]) -> None:
    """Snakemake's report collects a fixed list of files: where a section drew no plot (its
    stage did not run, or has nothing to draw), a picture that says so and why. The page
    itself shows no such picture: its section says it."""
    by_key = {s.key: s for s in built}
    for name, key in SNAKEMAKE_PLOTS.items():
        if not (out_dir / name).is_file():
            sec = by_key[key]
            why = "; ".join([sec.verdict, *sec.notes[:1]]) if sec.notes else sec.verdict
            plot_nothing(out_dir / name, f"{sec.title}: no plot in this set\n{why}")


def build_report(
    result_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    aiter_provenance: str | os.PathLike[str] | None = None,
    changes: str | os.PathLike[str] | None = None,
) -> Report:
    """Write index.html, summary.md and the plots for one result set (default: <set>/report/).

    The directory is replaced whole, so a report never mixes plots of two builds. `changes`
    is the changes step's JSON (default: the set's changes.json, when there is one): the
    first card says what changed since the archived set it names.
    """
    rs = ResultSet.load(result_dir)
    record = find_changes(rs, Path(changes) if changes is not None else None)
    target = Path(out_dir) if out_dir is not None else rs.directory / REPORT_DIR
    prov_path = Path(aiter_provenance) if aiter_provenance else None
    if prov_path is None:
        prov_path = find_aiter_provenance(rs.directory.resolve(), rs.aiter_id)
    prov = provenance(rs, Path(config) if config else None, prov_path)
    title = f"f4pipe report: {rs.aiter_id} · {rs.toolchain_id} · {rs.device_id}"
    with atomic_dir(target) as tmp:
        sections = build_sections(rs, tmp, record)
        write_absent_plots(tmp, sections)
        (tmp / "index.html").write_text(render_html(title, sections, prov))
        (tmp / "summary.md").write_text(render_markdown(title, sections, prov))
    plots = tuple(target / s.plot for s in sections if s.plot)
    return Report(target, target / "index.html", target / "summary.md", plots, tuple(sections))
