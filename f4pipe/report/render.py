"""Rendering report sections: the Section data both outputs share, value formatting, and the
HTML page (no script, no external resource but the PNGs beside it) and its markdown twin."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

KERNEL_PREFIX = "f4gemm_bf16_per1x32Fp4_"  # common to every f4gemm name; tables drop it


@dataclass
class Section:
    """One report section: a verdict line, a table (or none) and a plot (or none).

    `headline` is the verdict in a few words, number first, for the card at the top of the
    page ("35 of 35 equivalent, 0 unexplained bytes"): a card that carried the whole verdict
    made the first screen a wall of text. Its numbers are the verdict's own (the same counts,
    the same rounding), so a reader who opens the section reads the same figures; the card
    keeps the whole verdict as its tooltip."""

    key: str
    title: str
    verdict: str
    state: str  # ok | bad | none (not run / not measured) | info
    table: pd.DataFrame | None = None
    plot: str | None = None  # PNG file name beside index.html
    notes: list[str] = field(default_factory=list)
    code: dict[str, list[str]] = field(default_factory=dict)  # title -> preformatted lines
    headline: str = ""  # at most about 8 words, number first; "" shows the verdict


def short_kernel(kernel: str) -> str:
    return kernel.removeprefix(KERNEL_PREFIX)


def kernel_order(kernel: str) -> tuple[str | int, ...]:
    """Natural order: a tile's numbers compare as numbers, so 32x1024 comes before 256x256
    and after 32x512, as an engineer reads tile sizes (text order would not)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", kernel))


def in_kernel_order(column: pd.Series) -> pd.Series:
    """A `sort_values(key=...)` key: the kernel column in natural order, others as they are."""
    return column.map(kernel_order) if column.name == "kernel" else column


def shape_label(row: pd.Series | dict[str, Any]) -> str:
    return f"{row['m']}x{row['n']}x{row['k']}" + (
        f" /{1 << int(row['log2_k_split'])}" if int(row["log2_k_split"]) else ""
    )


def fmt_value(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))  # integer columns that a merge turned into floats
        return f"{value:.{digits}g}"
    return str(value)


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#1b1f24;
max-width:1320px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid
#d0d7de;padding-bottom:4px} .sub{color:#57606a;font-size:13px}
.glance{display:grid;grid-template-columns:repeat(auto-fit,minmax(120px,1fr));gap:8px;
margin:10px 0}
.card{border-radius:6px;padding:6px 8px;font-size:13px;border:1px solid #d0d7de}
a.card{display:block;color:inherit;text-decoration:none}
a.card:hover{box-shadow:0 0 0 2px #0969da}
.glance .card b{display:block;font-size:11.5px;font-weight:600;color:#424a53;
margin-bottom:3px;overflow-wrap:anywhere}
.glance .card span{display:block;font-size:14px;font-weight:700;line-height:1.25;
overflow-wrap:anywhere}
.headline{display:grid;grid-template-columns:1fr auto 1fr;gap:10px;align-items:start;
margin:8px 0} .headline figure{margin:0;min-width:0} .headline img{width:100%;height:auto}
.headline img.tall{height:490px;width:auto}
.headline figcaption{font-size:12px}
.ok{background:#dafbe1;border-color:#4ac26b}.bad{background:#ffebe9;border-color:#ff8182}
.none{background:#f6f8fa;border-color:#afb8c1}.info{background:#ddf4ff;border-color:#54aeff}
table{border-collapse:collapse;font-size:12px;margin:8px 0}
th,td{border:1px solid #d0d7de;padding:2px 6px;text-align:left;white-space:nowrap}
th{background:#f6f8fa;position:sticky;top:0} td.num{text-align:right;font-variant-numeric:
tabular-nums} td.yes{color:#1a7f37} td.no{color:#cf222e;font-weight:bold}
td.st-passed,td.st-measured{color:#1a7f37} td.st-failed,td.st-error{color:#cf222e;
font-weight:bold} td.st-skipped{color:#6e7781}
td.detail{white-space:normal;min-width:280px;max-width:480px}
.panel{border:1px dashed #afb8c1;background:#f6f8fa;padding:14px;font-size:14px;margin:8px 0}
.scroll{overflow-x:auto;max-width:100%}
img{max-width:100%;border:1px solid #d0d7de} h3{font-size:14px}
pre{background:#f6f8fa;border:1px solid #d0d7de;padding:8px;font-size:12px;overflow-x:auto}
ul.notes{font-size:12px;color:#57606a}
summary{cursor:pointer;font-size:13px;margin:6px 0;color:#0969da}
"""


REASON_CHARS = 90  # in table cells; the full text is the cell's tooltip and in the notes


def _cell(column: str, value: Any) -> str:
    text = fmt_value(value)
    classes = []
    if isinstance(value, bool):
        classes.append("yes" if value else "no")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        classes.append("num")
    if column.endswith("status"):
        classes.append(f"st-{text.split('->')[-1].strip()}")  # "passed -> failed": as failed
    if column.endswith("reason") or column == "detail":
        classes.append("detail")
        if len(text) > REASON_CHARS:
            short = html.escape(text[:REASON_CHARS])
            return f'<td class="detail" title="{html.escape(text)}">{short}…</td>'
    cls = f' class="{" ".join(classes)}"' if classes else ""
    return f"<td{cls}>{html.escape(text)}</td>"


def html_table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for row in df.itertuples(index=False):
        body.append(
            "<tr>"
            + "".join(_cell(str(c), v) for c, v in zip(df.columns, row, strict=True))
            + "</tr>"
        )
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(body)}</table></div>'


def md_table(df: pd.DataFrame, max_rows: int | None = None) -> str:
    shown = df if max_rows is None else df.head(max_rows)
    lines = [
        "| " + " | ".join(str(c) for c in df.columns) + " |",
        "|" + "---|" * len(df.columns),
    ]
    for row in shown.itertuples(index=False):
        cells = (fmt_value(v).replace("|", "\\|").replace("\n", " ") for v in row)
        lines.append("| " + " | ".join(cells) + " |")
    if max_rows is not None and len(df) > max_rows:
        lines.append(f"\n({len(df) - max_rows} more rows in index.html)")
    return "\n".join(lines)


def _drop_empty_reasons(df: pd.DataFrame) -> pd.DataFrame:
    """Hide reason and detail columns that say nothing (every run went through)."""
    empty = [
        c
        for c in df.columns
        if (c.endswith("reason") or c == "detail") and not df[c].fillna("").any()
    ]
    return df.drop(columns=empty)


#: Tables longer than this are folded under a <details> line: the page's first screens stay
#: the cards, verdicts and plots, and a reader opens the rows they want (the 35 kernels fit).
FOLD_ROWS = 40


def folded_table(df: pd.DataFrame) -> str:
    if len(df) <= FOLD_ROWS:
        return html_table(df)
    return f"<details><summary>{len(df)} rows</summary>{html_table(df)}</details>"


def folded_code(name: str, lines: Sequence[str]) -> str:
    """A reproducer or listing, folded: they run to hundreds of lines and are read on demand."""
    body = html.escape("\n".join(lines))
    return (
        f"<details><summary>{html.escape(name)} ({len(lines)} lines)</summary>"
        f"<pre>{body}</pre></details>"
    )


#: The sections whose plots lead the page, beside each other under the cards: how fast, is it
#: safe, splitK error. The first screen at 1400 x 900 px holds them (tests/test_browser.py).
HEADLINE_PLOTS = ("bench", "safety", "splitk")
#: Plots shown at (about) their drawn height rather than their column's width: the safety
#: heatmap is sized to its grid (f4pipe.report.plots.HEATMAP_CELL_IN); scaled to a column it
#: would shrink its 35 rows of labels below legibility.
TALL_PLOTS = ("safety",)
TALL = ' class="tall"'


def headline_plots(sections: Sequence[Section]) -> str:
    """The headline sections' plots in one row, each linked to its section (plots before
    tables: a reader sees the answers before the rows behind them)."""
    by_key = {s.key: s for s in sections if s.plot}
    figures = [
        f'<figure><a href="#{s.key}"><img{TALL if s.key in TALL_PLOTS else ""} '
        f'src="{html.escape(s.plot or "")}" '
        f'alt="{html.escape(s.title)}"></a><figcaption>{html.escape(s.title)}</figcaption></figure>'
        for s in (by_key[k] for k in HEADLINE_PLOTS if k in by_key)
    ]
    return f'<div class="headline">{"".join(figures)}</div>' if figures else ""


def card_title(sec: Section) -> str:
    """A section's name on its card and in the summary: its title up to a colon."""
    return sec.title.split(":")[0]


def glance_card(sec: Section) -> str:
    """One card of the first screen: the section's name and its headline, large, linked to
    the section; the whole verdict is the tooltip (and the section's first line)."""
    return (
        f'<a class="card {sec.state}" href="#{sec.key}" title="{html.escape(sec.verdict)}">'
        f"<b>{html.escape(card_title(sec))}</b>"
        f"<span>{html.escape(sec.headline or sec.verdict)}</span></a>"
    )


def render_html(title: str, sections: list[Section], prov: list[tuple[str, str]]) -> str:
    cards = "".join(glance_card(s) for s in sections)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f'<h1 id="top">{html.escape(title)}</h1>',
        f'<div class="sub">{html.escape(" · ".join(f"{k}: {v}" for k, v in prov[:4]))}</div>',
        f'<div class="glance">{cards}</div>',
        headline_plots(sections),
    ]
    for s in sections:
        parts.append(f'<h2 id="{s.key}">{html.escape(s.title)}</h2>')
        if s.state == "none":
            parts.append(f'<div class="panel">{html.escape(s.verdict)}</div>')
        else:
            parts.append(f'<div class="card {s.state}">{html.escape(s.verdict)}</div>')
        if s.plot and s.key in HEADLINE_PLOTS:
            parts.append('<p class="sub">plot: <a href="#top">at the top of the page</a></p>')
        elif s.plot:
            parts.append(f'<p><img src="{html.escape(s.plot)}" alt="{html.escape(s.title)}"></p>')
        if s.notes:
            items = "".join(f"<li>{html.escape(n)}</li>" for n in s.notes)
            parts.append(f'<ul class="notes">{items}</ul>')
        if s.table is not None and len(s.table):
            parts.append(folded_table(_drop_empty_reasons(s.table)))
        for name, lines in s.code.items():
            parts.append(folded_code(name, lines))
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in prov)
    parts.append(
        f'<h2 id="provenance">Provenance</h2><div class="scroll"><table>{rows}</table></div>'
    )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render_markdown(title: str, sections: list[Section], prov: list[tuple[str, str]]) -> str:
    lines = [f"# {title}", "", "| section | verdict |", "|---|---|"]
    lines += [f"| {card_title(s)} | {s.verdict} |" for s in sections]
    for s in sections:
        lines += ["", f"## {s.title}", "", s.verdict, ""]
        lines += [f"- {n}" for n in s.notes]
        if s.plot:
            lines += ["", f"![{s.title}]({s.plot})"]
        if s.table is not None and len(s.table):
            max_rows = None if s.key == "roundtrip" else 60
            lines += ["", md_table(_drop_empty_reasons(s.table), max_rows)]
        for name, code in s.code.items():
            lines += ["", f"### {name}", "", "```diff", *code, "```"]
    lines += ["", "## Provenance", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in prov]
    return "\n".join(lines) + "\n"
