"""What every card of the report's first screen must be: a short headline whose numbers are the
verdict's own (tests/test_report.py, test_changes.py, test_pipeline.py, test_update.py)."""

from __future__ import annotations

import html
import re

from f4pipe.report.render import Section, card_title

#: A number as a headline or a verdict spells it: 35, 0.92, 3.98.
NUMBER = re.compile(r"\d+(?:\.\d+)?")
#: At most this many words: the card is read at a glance.
MAX_WORDS = 8


def check_headline(sec: Section) -> None:
    assert sec.headline, f"{sec.key}: no headline"
    assert len(sec.headline.split()) <= MAX_WORDS, sec.headline
    missing = set(NUMBER.findall(sec.headline)) - set(NUMBER.findall(sec.verdict))
    assert not missing, f"{sec.key}: {missing} of {sec.headline!r} not in {sec.verdict!r}"


CARD = re.compile(
    r'<a class="card (?P<state>\w+)" href="#(?P<key>\w+)" title="(?P<verdict>[^"]*)">'
    r"<b>(?P<title>[^<]*)</b><span>(?P<headline>[^<]*)</span></a>"
)


def cards_of(page: str) -> list[dict[str, str]]:
    """The cards of the first screen, in page order, read from the HTML (unescaped)."""
    glance = page.split('<div class="glance">', 1)[1].split("</div>", 1)[0]
    return [{k: html.unescape(v) for k, v in m.groupdict().items()} for m in CARD.finditer(glance)]


def check_cards(page: str, sections: list[Section]) -> None:
    """One card per section, in order: its state, a link to it, its verdict as the tooltip,
    its name and its headline (which check_headline holds to the verdict)."""
    cards = cards_of(page)
    assert [c["key"] for c in cards] == [s.key for s in sections]
    for card, sec in zip(cards, sections, strict=True):
        check_headline(sec)
        assert card == {
            "state": sec.state,
            "key": sec.key,
            "verdict": sec.verdict,
            "title": card_title(sec),
            "headline": sec.headline,
        }
        assert f'<h2 id="{sec.key}">' in page
