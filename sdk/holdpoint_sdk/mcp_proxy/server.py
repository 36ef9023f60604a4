"""The proxy as an MCP server: stdio towards its client, stdio or streamable HTTP towards the
upstream server, the upstream's identity and capabilities passed on unchanged."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any, cast

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from pydantic import BaseModel

from .. import __version__
from ..reviewer import AsyncReviewer
from .calls import CLIENT_ASK
from .config import ProxyConfig
from .decide import ClientReview, session_ask
from .http import LeanAsyncHoldpoint
from .proxy import HoldpointProxy
from .stdio import client_channel
from .upstream import SessionUpstream, StdioUpstream, Upstream, stdio_upstream

logger = logging.getLogger("holdpoint_sdk.mcp_proxy")

# Requests passed through (tools/call is the proxy's own), by the capability that offers them.
_PASSED: dict[str, list[tuple[str, type[BaseModel]]]] = {
    "tools": [("tools/list", types.PaginatedRequestParams)],
    "resources": [
        ("resources/list", types.PaginatedRequestParams),
        ("resources/templates/list", types.PaginatedRequestParams),
        ("resources/read", types.ReadResourceRequestParams),
        ("resources/subscribe", types.SubscribeRequestParams),
        ("resources/unsubscribe", types.UnsubscribeRequestParams),
    ],
    "prompts": [("prompts/list", types.PaginatedRequestParams), ("prompts/get", types.GetPromptRequestParams)],
    "completions": [("completion/complete", types.CompleteRequestParams)],
    "logging": [("logging/setLevel", types.SetLevelRequestParams)],
}
# Holdpoint's own variables are not the upstream's business.
_PRIVATE_ENV = ("HOLDPOINT_API_KEY", "HOLDPOINT_REVIEWER_TOKEN_FILE")


def build_server(proxy: HoldpointProxy, upstream: types.InitializeResult) -> tuple[Server[Any], InitializationOptions]:
    """An MCP server that answers as the upstream does, with tools/call guarded."""
    info = upstream.server_info
    server: Server[Any] = Server(info.name, version=info.version, title=info.title, instructions=upstream.instructions)
    capabilities = upstream.capabilities

    async def passed(ctx: ServerRequestContext[Any], params: BaseModel) -> dict[str, Any]:
        return await proxy.forward(ctx.method, ctx.params)

    async def call_tool(ctx: ServerRequestContext[Any], params: BaseModel) -> dict[str, Any]:
        CLIENT_ASK.set(session_ask(ctx.session))  # this handler's context only
        return await proxy.call_tool(ctx.params or {})

    for capability, methods in _PASSED.items():
        if getattr(capabilities, capability, None) is None:
            continue
        for method, params_type in methods:
            if method == "resources/subscribe" or method == "resources/unsubscribe":
                resources = capabilities.resources
                if resources is None or not resources.subscribe:
                    continue
            server.add_request_handler(method, params_type, passed)
    if capabilities.tools is not None:
        server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    options = InitializationOptions(
        server_name=info.name,
        server_version=info.version,
        title=info.title,
        description=info.description,
        capabilities=capabilities,
        instructions=upstream.instructions,
        website_url=info.website_url,
        icons=info.icons,
    )
    return server, options


def upstream_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The proxy's environment minus Holdpoint's key: what an upstream launched over stdio sees."""
    source = os.environ if environ is None else environ
    return {key: value for key, value in source.items() if key not in _PRIVATE_ENV}


@contextlib.asynccontextmanager
async def connect_upstream(config: ProxyConfig) -> AsyncIterator[tuple[Upstream, types.InitializeResult]]:
    """The upstream, initialized: over stdio the proxy's requests take the lane of
    `stdio_upstream` (the `ClientSession` does the handshake and answers what the server asks),
    over streamable HTTP they go through the session."""
    async with contextlib.AsyncExitStack() as stack:
        lane: StdioUpstream | None = None
        if config.upstream_url:
            read, write = await stack.enter_async_context(streamable_http_client(config.upstream_url))
        elif sys.platform == "win32":  # pragma: no cover - the lane needs POSIX process groups
            command, *args = config.upstream_command
            parameters = StdioServerParameters(command=command, args=args, env=upstream_environment())
            read, write = await stack.enter_async_context(stdio_client(parameters))
        else:
            command, *args = config.upstream_command
            lane = await stack.enter_async_context(stdio_upstream(command, args, upstream_environment()))
            read, write = lane.session_streams
        session = await stack.enter_async_context(
            ClientSession(read, write, client_info=types.Implementation(name="holdpoint-mcp", version=__version__))
        )
        initialized = await session.initialize()
        yield (lane if lane is not None else SessionUpstream(session)), initialized


async def serve(config: ProxyConfig) -> None:
    """Run the proxy until its client closes stdin."""
    async with (
        connect_upstream(config) as (upstream, initialized),
        LeanAsyncHoldpoint(config.url, config.api_key, timeout=10.0) as holdpoint,
        contextlib.AsyncExitStack() as stack,
    ):
        review = None
        if config.reviewer_token and config.reviewer_team:
            # Its own client (httpx, its own connections): used only for calls held for approval.
            review = ClientReview(
                AsyncReviewer(config.url, config.reviewer_token), config.reviewer_team, config.elicit_timeout_s
            )
            stack.push_async_callback(review.aclose)
        proxy = HoldpointProxy(config, holdpoint, upstream, review)
        server, options = build_server(proxy, initialized)
        logger.info(
            "holdpoint-mcp: guarding %s for run %s via %s", initialized.server_info.name, config.run_id, config.url
        )
        try:
            async with client_channel(
                proxy.call_tool if initialized.capabilities.tools is not None else None
            ) as channel:
                if channel is None:
                    async with stdio_server() as (read, write):
                        await server.run(read, write, options)
                    return
                async with channel.streams() as (read, write):
                    await server.run(cast(Any, read), cast(Any, write), options)
        finally:
            # Leaving the client's block flushes the success reports still queued
            # (report_success="after"); how many there are is logged first.
            if holdpoint.reports_queued:
                logger.warning("holdpoint-mcp: flushing %d queued success report(s)", holdpoint.reports_queued)
