"""W3C traceparent parsing: what is kept, what is ignored (never an error)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from telemetry.traceparent import TraceParent, traceparent_parse

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{SPAN}-01"


def test_it_reads_the_trace_the_parent_and_the_flags() -> None:
    assert traceparent_parse(VALID) == TraceParent(trace_id=TRACE, parent_id=SPAN, flags=1)
    assert traceparent_parse(f"00-{TRACE}-{SPAN}-00") == TraceParent(trace_id=TRACE, parent_id=SPAN, flags=0)


def test_it_allows_the_optional_whitespace_around_the_value() -> None:
    assert traceparent_parse(f" \t{VALID} ") is not None


def test_a_later_version_may_append_fields() -> None:
    assert traceparent_parse(f"01-{TRACE}-{SPAN}-01-what-comes-later") == TraceParent(TRACE, SPAN, 1)
    assert traceparent_parse(f"01-{TRACE}-{SPAN}-01") == TraceParent(TRACE, SPAN, 1)


def test_it_ignores_what_breaks_the_rules() -> None:
    for header in [
        "",
        "00",
        f"00-{TRACE}-{SPAN}",  # no flags
        f"00-{TRACE.upper()}-{SPAN}-01",  # uppercase
        f"00-{'0' * 32}-{SPAN}-01",  # the invalid trace id
        f"00-{TRACE}-{'0' * 16}-01",  # the invalid parent id
        f"ff-{TRACE}-{SPAN}-01",  # the forbidden version
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"01-{TRACE}-{SPAN}-01extra",  # a later version's extra fields follow a dash
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-1",
        f"00_{TRACE}_{SPAN}_01",
        f"00-{TRACE}-{SPAN}-0g",
        f"00-{TRACE}-{SPAN}-01\n",
        VALID + " " * 600,
    ]:
        assert traceparent_parse(header) is None, header


def test_it_keeps_a_well_formed_tracestate_and_drops_another() -> None:
    assert traceparent_parse(VALID, "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE").tracestate == (  # type: ignore[union-attr]
        "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    )
    assert traceparent_parse(VALID, "vendor@tenant=x").tracestate == "vendor@tenant=x"  # type: ignore[union-attr]
    for state in ["no equals sign", "a=1,a=2", "UPPER=1", "a=" + "x" * 300, ",".join(f"k{i}=v" for i in range(33))]:
        parsed = traceparent_parse(VALID, state)
        assert parsed is not None and parsed.tracestate == "", state


@given(st.text(max_size=300), st.one_of(st.none(), st.text(max_size=300)))
def test_no_header_raises(header: str, state: str | None) -> None:
    parsed = traceparent_parse(header, state)
    assert parsed is None or (len(parsed.trace_id) == 32 and len(parsed.parent_id) == 16)


@given(
    st.text(alphabet="0123456789abcdef", min_size=32, max_size=32).filter(lambda s: set(s) != {"0"}),
    st.text(alphabet="0123456789abcdef", min_size=16, max_size=16).filter(lambda s: set(s) != {"0"}),
    st.integers(0, 255),
)
def test_every_valid_header_is_read_back(trace_id: str, parent_id: str, flags: int) -> None:
    parsed = TraceParent(trace_id=trace_id, parent_id=parent_id, flags=flags)
    assert traceparent_parse(parsed.header()) == parsed
