"""The proxy's stdin and stdout as non-blocking pipes (holdpoint_sdk.mcp_proxy.stdio): lines as
`stdio_server` reads them, whatever the pipe's chunks; only pipes and sockets are taken over.
The whole proxy runs on them in every end-to-end test (an MCP client launches it with pipes)."""

from __future__ import annotations

import asyncio
import os
import tempfile

from holdpoint_sdk.mcp_proxy.stdio import PipeLines, _is_pipe


async def _lines_of(chunks: list[bytes]) -> list[str]:
    read_fd, write_fd = os.pipe()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", 0))

    async def feed() -> None:
        with os.fdopen(write_fd, "wb", 0) as pipe:
            for chunk in chunks:
                await loop.run_in_executor(None, pipe.write, chunk)
                await asyncio.sleep(0.01)

    feeding = asyncio.ensure_future(feed())
    lines = [line async for line in PipeLines(reader)]
    await feeding
    return lines


def test_lines_come_whole_however_the_pipe_cuts_them() -> None:
    big = '{"jsonrpc":"2.0","id":1,"result":{"text":"' + "x" * 300_000 + '"}}'
    chunks = [b'{"a":1}\n{"b"', b":2}\n" + big[:1000].encode(), big[1000:].encode() + b"\n", '{"é":3}'.encode()]

    lines = asyncio.run(_lines_of(chunks))

    assert lines == ['{"a":1}\n', '{"b":2}\n', big + "\n", '{"é":3}']


def test_only_pipes_and_sockets_are_taken_over() -> None:
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as regular:
        assert _is_pipe(read_fd) and _is_pipe(write_fd)
        assert not _is_pipe(regular.fileno())
    os.close(read_fd)
    os.close(write_fd)
    assert not _is_pipe(read_fd)  # closed
