"""The names Holdpoint records for an upstream's tools (holdpoint_sdk.mcp_proxy.names): always in
Holdpoint's tool pattern, a function of the name alone, and distinct within one listing."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

import anyio
import pytest
from holdpoint_sdk.mcp_proxy import ProxyConfig
from holdpoint_sdk.mcp_proxy.names import ToolNames, holdpoint_tool_name, is_valid_tool_name
from holdpoint_sdk.mcp_proxy.proxy import HoldpointProxy
from hypothesis import given, settings
from hypothesis import strategies as st

from envelopes.contract import TOOL_PATTERN

# Holdpoint's own pattern, anchored at the very end (`$` would let a trailing newline through).
SERVER_PATTERN = re.compile(TOOL_PATTERN.removesuffix("$") + r"\Z")

names = st.one_of(
    st.text(max_size=140),
    st.from_regex(r"[a-z][a-zA-Z0-9]{0,30}", fullmatch=True),  # camelCase
    st.from_regex(TOOL_PATTERN.replace("{0,99}", "{0,20}"), fullmatch=True),  # already valid
    st.text(alphabet="aAzZ09_.- \n\u00e9\u0301\u65e5", max_size=120),
)


@settings(max_examples=600, deadline=None)
@given(names)
def test_every_mapped_name_matches_holdpoints_tool_pattern_and_is_the_same_every_time(name: str) -> None:
    recorded = holdpoint_tool_name(name)
    assert SERVER_PATTERN.match(recorded), recorded
    assert holdpoint_tool_name(name) == recorded
    assert (recorded == name) == is_valid_tool_name(name)


@settings(max_examples=300, deadline=None)
@given(st.lists(names, max_size=30, unique=True))
def test_distinct_names_of_one_listing_are_recorded_under_distinct_names(listing: list[str]) -> None:
    tools = ToolNames()
    tools.learn(listing)
    recorded = [tools.holdpoint_name(name) for name in listing]
    assert all(name is not None for name in recorded)
    assert len(set(recorded)) == len(listing)


@settings(max_examples=300, deadline=None)
@given(st.lists(names, min_size=1, max_size=20, unique=True), st.data())
def test_with_twins_and_crafted_names_listed_a_call_is_refused_rather_than_merged(
    listing: list[str], data: st.DataObject
) -> None:
    # Snake-case twins of mapped names, and valid names spelling another's mapping exactly.
    twins = [holdpoint_tool_name(name) for name in listing if not is_valid_tool_name(name)]
    twins += [twin.rpartition("-")[0] for twin in twins if twin.rpartition("-")[0]]
    extra = data.draw(st.lists(st.sampled_from(twins), unique=True)) if twins else []
    full = list(dict.fromkeys([*listing, *extra]))
    tools = ToolNames()
    tools.learn(full)

    recorded = {name: tools.holdpoint_name(name) for name in full}

    kept = [name for name in recorded.values() if name is not None]
    assert len(set(kept)) == len(kept)
    for name, as_recorded in recorded.items():
        others = [other for other in full if other != name and holdpoint_tool_name(other) == holdpoint_tool_name(name)]
        assert (as_recorded is None) == bool(others and not is_valid_tool_name(name))
        assert as_recorded in (None, holdpoint_tool_name(name))


@pytest.mark.parametrize(
    ("upstream", "prefix"),
    [
        ("createInvoice", "create_invoice-"),
        ("HTTPServerStart", "http_server_start-"),
        ("Send Email", "send_email-"),
        ("café au lait", "cafe_au_lait-"),
        ("send_email\n", "send_email-"),
        ("_private", "private-"),
        ("日本語", "tool-"),
    ],
)
def test_a_name_outside_the_pattern_becomes_snake_case_with_a_hash_of_its_own(upstream: str, prefix: str) -> None:
    recorded = holdpoint_tool_name(upstream)
    assert recorded.startswith(prefix) and re.fullmatch(r"[0-9a-f]{8}", recorded.removeprefix(prefix))


def test_a_valid_name_is_recorded_as_it_is_and_a_long_one_is_cut_to_100_with_its_hash() -> None:
    assert holdpoint_tool_name("create_invoice") == "create_invoice"
    assert holdpoint_tool_name("a" * 100) == "a" * 100
    long = holdpoint_tool_name("a" * 101)
    assert len(long) == 100 and long.startswith("a" * 91 + "-")
    assert holdpoint_tool_name("a" * 101) != holdpoint_tool_name("a" * 102)


def test_camelcase_and_its_snake_case_twin_stay_two_tools() -> None:
    assert holdpoint_tool_name("createInvoice") != holdpoint_tool_name("create_invoice") == "create_invoice"
    assert holdpoint_tool_name("createInvoice") != holdpoint_tool_name("CreateInvoice")


def test_a_listed_name_spelling_another_tools_mapping_makes_that_tool_refused_never_merged() -> None:
    crafted = holdpoint_tool_name("createInvoice")  # a valid name, listed by the same upstream
    tools = ToolNames()
    tools.learn(["createInvoice", crafted, "get_balance"])
    assert tools.holdpoint_name("createInvoice") is None
    assert tools.holdpoint_name(crafted) == crafted  # a valid name is its own
    assert tools.holdpoint_name("get_balance") == "get_balance"
    # Unlisted names are mapped all the same; the check covers what the upstream listed.
    assert ToolNames().holdpoint_name("createInvoice") == crafted


class ListingUpstream:
    """An upstream that lists `names` and records every request it is sent."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.requests: list[str] = []

    async def request(self, method: str, params: Mapping[str, Any] | None, timeout: float | None) -> dict[str, Any]:
        self.requests.append(method)
        return {"tools": [{"name": name, "inputSchema": {"type": "object"}} for name in self.names]}


class NoHoldpoint:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"Holdpoint was asked ({name}) for a call that must be refused first")


def test_the_proxy_refuses_a_call_whose_recorded_name_another_listed_tool_shares() -> None:
    crafted = holdpoint_tool_name("createInvoice")
    upstream = ListingUpstream(["createInvoice", crafted])
    config = ProxyConfig(url="http://127.0.0.1:9", api_key="hp_x", run_id="r")
    proxy = HoldpointProxy(config, cast(Any, NoHoldpoint()), upstream)

    async def scenario() -> dict[str, Any]:
        await proxy.forward("tools/list", {})
        return await proxy.call_tool({"name": "createInvoice", "arguments": {"amount": 1}})

    refused = anyio.run(scenario)

    assert refused["isError"] is True
    assert "recorded under the same name as 'createInvoice'; the call was not made" in refused["content"][0]["text"]
    assert upstream.requests == ["tools/list"]  # never called
