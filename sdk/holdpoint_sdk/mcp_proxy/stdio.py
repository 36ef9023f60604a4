"""The proxy's own stdin and stdout as non-blocking pipes for the mcp package's `stdio_server`.

`stdio_server()` on its own reads each line of stdin in a worker thread and writes and flushes
each message in two more (anyio's `wrap_file`): three thread hand-offs per tools/call, each two
context switches that a loaded machine may delay. An MCP client launches the proxy with pipes
(or a socket pair) for both, which asyncio reads and writes without threads; this module gives
`stdio_server` such streams. On anything else (a terminal, a file) it gives None and
`stdio_server` keeps its threads.

Like `stdio_server`'s own claim, fd 0 and fd 1 are diverted while serving (to the null device
and to stderr), so that a stray print in the proxy cannot corrupt the MCP channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator

READ_CHUNK = 256 * 1024


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class PipeLines:
    """What `stdio_server` reads stdin as: `async for line in stdin` (text lines, of any length,
    as with its own reader)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.pending = bytearray()
        self.searched = 0  # bytes of `pending` known to hold no newline

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            cut = self.pending.find(b"\n", self.searched)
            if cut >= 0:
                line = bytes(self.pending[: cut + 1])
                del self.pending[: cut + 1]
                self.searched = 0
                return line.decode("utf-8", errors="replace")
            self.searched = len(self.pending)
            chunk = await self.reader.read(READ_CHUNK)
            if not chunk:
                if not self.pending:
                    raise StopAsyncIteration
                line, self.pending, self.searched = bytes(self.pending), bytearray(), 0
                return line.decode("utf-8", errors="replace")
            self.pending += chunk


class PipeWriter:
    """What `stdio_server` writes stdout as: `await write(text)`, `await flush()`."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def write(self, text: str) -> None:
        self.writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self.writer.drain()


@contextlib.asynccontextmanager
async def pipe_stdio() -> AsyncIterator[tuple[PipeLines, PipeWriter] | tuple[None, None]]:
    """(stdin, stdout) for `stdio_server(stdin, stdout)`, or (None, None) when either is not a
    pipe or a socket (then `stdio_server` uses its threads)."""
    if not (_is_pipe(0) and _is_pipe(1)):
        yield None, None
        return
    loop = asyncio.get_running_loop()
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    reader = asyncio.StreamReader(limit=READ_CHUNK, loop=loop)
    read_transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(wire_in, "rb", buffering=0)
    )
    write_transport, write_protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop=loop), os.fdopen(wire_out, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
    try:
        yield PipeLines(reader), PipeWriter(writer)
    finally:
        read_transport.close()
        write_transport.close()
