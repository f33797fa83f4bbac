"""Identifier extraction's shortcuts give what the full scans give, on any text: a message
with no capital skips the capitalised-run scan, and the loose words fold an ASCII word to
its lower case without the folding rules (both run on every turn's user message)."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from neotoma_agent._recall.extract import _capitalised_runs, _scan_runs
from neotoma_agent._recall.loose import MAX_LOOSE_CHARS, loose_words
from neotoma_agent._recall.search_text import words

# Upper, title and lower case beside uncased letters, digits, marks and separators: "ǅ" is
# title case (neither upper nor lower), "ϒ" upper case with no lower case of its own.
_CHARS = "aZbéÉǅǆϒσΣßẞıİ0é\u0301 ._-'’&\n?:"
_WORDS = ("de", "la", "van", "of", "the", "Acme", "acme", "mcDonald", "iPhone", "I", "Dr.")
texts = st.lists(
    st.one_of(st.text(alphabet=_CHARS, max_size=6), st.sampled_from(_WORDS)), max_size=10
).map(" ".join)


@given(texts)
@example("a\u01c5")  # a title-case letter inside a word: camel case, a run
@example("x \u03d2y")
def test_a_message_with_no_capital_has_the_runs_the_full_scan_finds(text: str) -> None:
    assert _capitalised_runs(text) == _scan_runs(text)


def _folded_words(text: str) -> tuple[str, ...]:
    # Each word of the text as the folding rules fold it (accents off, lower case), the
    # words they fold to nothing left out.
    prose = text[:MAX_LOOSE_CHARS]
    return tuple(f for w in re.findall(r"[^\W_]+", prose) if (f := "".join(words(w))))


@given(texts)
@example("Tell ACME and María")
def test_the_loose_words_are_the_message_s_words_as_the_folding_rules_fold_them(
    text: str,
) -> None:
    found = loose_words(text, [])
    assert found.tokens == _folded_words(text)
    assert found.covered == (False,) * len(found.tokens)
