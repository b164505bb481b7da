"""Whether a Postgres server answers at all, within a fraction of a second.

A probe opens a connection and sends a first message a client may send (a GSSENCRequest:
asking for GSSAPI encryption); a server that works answers at once, whatever its
authentication: one byte (`N`, or `G`), or an error from a server that does not know the
request. Any answer will do. (An SSLRequest would do too, but a server with SSL on answers
`S` and then logs the handshake that never comes, on every probe.) libpq's
own connect cannot wait less than 2 s for a server that takes the connection and then
never answers (a frozen host: its kernel accepts, its postmaster does not read), and
that wait is what a caller would wait.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time

from psycopg.conninfo import conninfo_to_dict

GSSENC_REQUEST = struct.pack("!ii", 8, 80877104)
DEFAULT_SOCKET_DIR = "/var/run/postgresql"


class NoAnswer(Exception):
    """The server did not answer the probe in time (or refused it)."""


def knock(url: str, timeout: float) -> None:
    """Returns when one of the URL's hosts answers within `timeout` seconds; NoAnswer otherwise."""
    params = conninfo_to_dict(url)
    hosts = str(params.get("host") or params.get("hostaddr") or DEFAULT_SOCKET_DIR).split(",")
    ports = str(params.get("port") or 5432).split(",")
    deadline = time.monotonic() + timeout
    for n, host in enumerate(hosts):
        port = int(ports[n] if n < len(ports) else ports[-1])
        left = deadline - time.monotonic()
        if left <= 0:
            break
        with contextlib.suppress(OSError):
            if host.startswith("/"):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(left)
                sock.connect(f"{host}/.s.PGSQL.{port}")
            else:
                sock = socket.create_connection((host, port), timeout=left)
            with sock:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                sock.sendall(GSSENC_REQUEST)
                if sock.recv(1):
                    return
    raise NoAnswer(f"no answer from {', '.join(hosts)} within {timeout} s")
