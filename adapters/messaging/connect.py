"""NATS URLs as Chronicle's settings take them: one server, or a cluster's, comma-separated."""

from __future__ import annotations

import urllib.parse
from typing import Any

from chronicle_contract.bus import server_urls


def connect_options(url: str) -> dict[str, Any]:
    """nats.connect's `servers` and credentials for a URL that may list several servers.

    Credentials given in any one URL apply to every server, those listed and those the
    cluster tells the client about later (a node it learns of after its own died: nats-py
    sends a URL's credentials only to that URL's server)."""
    servers, user, password = [], None, None
    for server in server_urls(url):
        parts = urllib.parse.urlsplit(server)
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password) if parts.password is not None else None
        servers.append(urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])))
    options: dict[str, Any] = {"servers": servers}
    if user is not None and password is not None:
        options.update(user=user, password=password)
    elif user is not None:
        options["token"] = user
    return options


def without_credentials(url: str) -> str:
    """The same servers, user names and passwords left out (for logs and for users)."""
    return ",".join(connect_options(url)["servers"])
