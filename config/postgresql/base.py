"""Django's PostgreSQL backend, with the per-request health check made without a round trip
when nothing has come from the server.

With CONN_HEALTH_CHECKS (on, config/settings.py) Django checks a persistent connection before
each request's first statement by sending `SELECT 1` and waiting for its answer: a round trip on
every API call (its cost: bench/README.md, "figures behind comments"). A server that closes a
connection (a restart, `pg_terminate_backend`, a pooler's idle timeout) sends an error or closes
the socket, which makes the socket readable; an idle connection of a live server receives
nothing. So the socket is asked first (`poll`, no waiting): nothing there, the connection is
usable; anything there, Django's own check runs and reads it. A server that vanished without a
word (a power cut, a cable) fails both checks alike: the statement after them waits for TCP to
give up.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        if connection.info.transaction_status == pq.TransactionStatus.IDLE and not _readable(connection.fileno()):
            return True
        return bool(super().is_usable())


def _readable(fd: int) -> bool:
    """Whether the socket has anything to read, or was closed or failed (POLLHUP, POLLERR)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))
