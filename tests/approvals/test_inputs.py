"""approvals/inputs.py: the input as the pages show it (tree, summary), without a database."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from approvals.inputs import SUMMARY_LENGTH, input_pretty, input_summary, input_tree, visible


def test_the_summary_reads_a_prefix_cut_anywhere() -> None:
    text = json.dumps({"amount": 1250, "customer": "cus_9", "note": "a long note " * 20})

    assert input_summary(text) == "amount: 1250, customer: cus_9, note: a long note a long note…"
    assert input_summary(text[:30]) == "amount: 1250, …"
    assert input_summary(text[:5]) == "…"
    assert input_summary("{}") == "{}"
    assert input_summary(None) == "" and input_summary("[1, 2]") == ""


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=30), JSON_VALUES, max_size=8), st.integers(0, 600))
@example(value={"\n": None}, cut=11)
@example(value={"a": "tab\there"}, cut=600)
def test_any_prefix_of_any_input_gives_one_bounded_line(value: dict, cut: int) -> None:
    line = input_summary(json.dumps(value, ensure_ascii=False)[:cut])

    assert len(line) <= SUMMARY_LENGTH + len(", …")
    assert "\n" not in line and "\u202e" not in line


def test_hidden_characters_are_written_out() -> None:
    assert visible("a\u202eb\u200bc\x07d\ttab") == "a\\u202eb\\u200bc\\u0007d\ttab"


def test_the_tree_and_the_edit_text_list_keys_in_canonical_order() -> None:
    value = {"b": 1, "a": {"z": 1, "\U0001f600": 2, "\uff61": 3}}

    html = input_tree(value).html

    assert html.index(">a<") < html.index(">b<")
    # RFC 8785 sorts by UTF-16 code units: the astral emoji (a surrogate pair, 0xD83D) before U+FF61.
    assert html.index(">z<") < html.index("\U0001f600") < html.index("\uff61")
    assert list(json.loads(input_pretty(value))) == ["a", "b"]
    assert list(json.loads(input_pretty(value))["a"]) == ["z", "\U0001f600", "\uff61"]


def test_the_tree_escapes_every_key_and_value() -> None:
    html = input_tree({"<k>": "<v>", "l": ["<i>"], '"q': {"&": "'"}}).html

    assert "<k>" not in html and "<v>" not in html and "<i>" not in html
    assert "&lt;k&gt;" in html and "&lt;v&gt;" in html and "&lt;i&gt;" in html and "&quot;q" in html


def test_a_key_with_a_newline_reads_on_one_line() -> None:
    html = input_tree({"amount\n": 1, "amount": 2}).html

    assert "amount\\n</span>" in html and "hidden characters shown" in html
