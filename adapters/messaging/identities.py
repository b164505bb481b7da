"""The service's own NATS identities: one connection per job, each allowed only its subjects.

A request names its reply subject, and whatever the answering connection may publish, a
request can aim a reply at (a confused deputy). So the connection that answers requests
may publish to inboxes only, and what the service publishes for its own reasons (signals,
the event feed, the job queue, usage reports) goes out on connections that may publish
nothing else; the one that manages streams (and keeps preview uploads) reaches the
JetStream API and object stores but no subject a stream captures from a publisher.

On a bus with the auth callout these identities are admitted by it (adapters/messaging/
callout.py): a connection names its role as the NATS user (`chronicle-responder`, ...)
with the service's password, and is granted `service_permissions` for the deployment's
subject prefix. On an open bus (no callout) each is a plain connection with the service's
URL: there is no least privilege to have there.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from enum import StrEnum
from typing import Any

import nats
import nats.errors
import orjson
from chronicle_contract.bus import INBOX, usage_subject
from chronicle_contract.errors import ChronicleError
from chronicle_contract.events import events_stream
from nats.aio.client import Client as NATS

from adapters.messaging.connect import connect_options

log = logging.getLogger(__name__)

# Where the service's connections receive JetStream acks and pulled messages: no user may
# subscribe there (users: `_INBOX.<scope>.>` only) and the responder may not publish there.
SERVICE_INBOX = "_CHRONICLE"
JOBS_CONSUMER = "workers"
# While an earlier version's instance may answer the callout (a rolling upgrade), it refuses
# the role identities it does not know; the callout's queue group picks a responder at
# random, so trying again soon reaches one that knows them.
ADMIT_WAIT = 30.0  # seconds a role's first connect is tried
ADMIT_RETRY = 0.2


class Role(StrEnum):
    RESPONDER = "responder"  # answers requests: publishes to users' inboxes only
    SIGNALS = "signals"  # HITL and job progress signals, on their owners' signal subjects
    JOBS = "jobs"  # puts jobs on the work queue and pulls them for the workers
    FEED = "feed"  # the event feed's stream
    USAGE = "usage"  # the instances' usage reports (fair share)
    STREAMS = "streams"  # creates streams and consumers, keeps preview uploads (object store)


IDENTITY = "chronicle-"  # a role's NATS user name: chronicle-<role>


def identity(role: Role) -> str:
    return IDENTITY + role.value


def service_inbox(role: Role) -> str:
    return f"{SERVICE_INBOX}.{role.value}"


def jobs_stream(prefix: str) -> str:
    return prefix.replace(".", "_").upper() + "_JOBS"


def service_permissions(prefix: str, role: Role) -> dict[str, Any]:
    """What a role's connection may publish and subscribe to (as a NATS user JWT's claims)."""
    own_inbox = [f"{service_inbox(role)}.>"]
    nothing = {"deny": [">"]}
    if role is Role.RESPONDER:
        return {"pub": {"allow": [f"{INBOX}.>"]}, "sub": {"allow": [f"{prefix}.cmd.>", f"{prefix}.query.>", "$SRV.>"]}}
    if role is Role.SIGNALS:
        return {"pub": {"allow": [f"{prefix}.signals.>"]}, "sub": nothing}
    if role is Role.JOBS:
        stream = jobs_stream(prefix)
        return {"pub": {"allow": [f"{prefix}.jobs.work", f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{JOBS_CONSUMER}",
                                  f"$JS.ACK.{stream}.{JOBS_CONSUMER}.>"]},
                "sub": {"allow": own_inbox}}
    if role is Role.FEED:
        stream = events_stream(prefix)
        return {"pub": {"allow": [f"{prefix}.events.>", f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.STREAM.MSG.GET.{stream}"]},
                "sub": {"allow": own_inbox}}
    if role is Role.USAGE:
        return {"pub": {"allow": [usage_subject(prefix)]}, "sub": {"allow": [usage_subject(prefix)]}}
    # STREAMS: the JetStream API (streams, consumers, object store buckets), object store
    # chunks and ordered consumers' flow control; no subject of signals, feed, jobs or inboxes.
    return {"pub": {"allow": ["$JS.API.>", "$O.>", "$JS.FC.>"]}, "sub": {"allow": own_inbox}}


STATIC_ROLES_HEADER = """\
# infra/nats/chronicle.conf with Chronicle's own connections as static users: for a
# deployment whose auth callout should admit users only (the service's connections then
# connect whether or not an instance answers the callout, and no flood of bad connects
# stands between them and the server). Each role is its own user, with the service's
# password, allowed exactly what the callout would grant it (adapters/messaging/
# identities.py service_permissions) for the subject prefix `{prefix}`; the service
# connects as before (CHRONICLE_NATS_URL, CHRONICLE_NATS_CALLOUT_URL and _SEED as in
# chronicle.conf). Generated: for another CHRONICLE_SUBJECT_PREFIX, write a file of your
# own with `chronicle nats-static-roles --prefix <prefix>`.
#
# Start with: nats-server -c infra/nats/static-roles.conf -js -sd <store dir>
"""


def static_roles_config(prefix: str) -> str:
    """A nats-server configuration: chronicle.conf's accounts and callout, and each role as
    a static user granted `service_permissions` (what the callout would grant)."""
    def subjects(grant: dict[str, list[str]]) -> str:
        return "{ " + ", ".join(f"{rule}: [{', '.join(orjson.dumps(s).decode() for s in grant[rule])}]"
                                for rule in ("allow", "deny") if rule in grant) + " }"

    roles = []
    for role in Role:
        grant = service_permissions(prefix, role)
        roles.append(
            f"      {{ user: {identity(role)}, password: $CHRONICLE_NATS_SERVICE_PASSWORD, permissions: {{\n"
            f"          publish: {subjects(grant['pub'])}\n"
            f"          subscribe: {subjects(grant['sub'])} }} }}\n"
        )
    names = ", ".join(["chronicle-auth", "chronicle", "chronicle-system", *(identity(role) for role in Role)])
    return (
        STATIC_ROLES_HEADER.format(prefix=prefix)
        + "\naccounts {\n"
        + "  AUTH {\n    users: [ { user: chronicle-auth, password: $CHRONICLE_NATS_CALLOUT_PASSWORD } ]\n  }\n"
        + "  CHRONICLE {\n    jetstream: enabled\n    users: [\n"
        + "      { user: chronicle, password: $CHRONICLE_NATS_SERVICE_PASSWORD }\n"
        + "".join(roles)
        + "    ]\n  }\n"
        + "  SYS {\n    users: [ { user: chronicle-system, password: $CHRONICLE_NATS_CALLOUT_PASSWORD, permissions: {\n"
        + '        publish: { allow: [ "$SYS.REQ.SERVER.*.KICK" ] }\n'
        + '        subscribe: { allow: [ "_INBOX.>" ] } } } ]\n  }\n}\nsystem_account: SYS\n\n'
        + "authorization {\n  timeout: 2s\n  auth_callout {\n    issuer: $CHRONICLE_NATS_ISSUER\n    account: AUTH\n"
        + f"    auth_users: [ {names} ]\n  }}\n}}\n"
    )


class ServiceIdentities:
    """The callout's side: a connection naming a role with the service's password gets that
    role's permissions; any other user name or password is refused."""

    def __init__(self, prefix: str, password: str) -> None:
        self.prefix = prefix
        self.password = password.encode()

    def admit(self, user: str, password: str) -> dict[str, Any]:
        role = next((role for role in Role if identity(role) == user), None)
        # (compared in constant time, whatever the user name: the answer's timing says nothing)
        matches = hmac.compare_digest(password.encode(), self.password)
        if role is None or not matches or not self.password:
            raise ChronicleError("unauthorized", "unknown service identity or wrong password")
        return service_permissions(self.prefix, role)


def role_connect_options(service_url: str, role: Role, *, scoped: bool) -> dict[str, Any]:
    """nats.connect's options for a role's connection: on a scoped bus (the callout admits
    it) the role's user name with the service's password and its own inbox prefix; on an
    open bus, the service's URL as it is."""
    options = connect_options(service_url)
    if scoped:
        if "password" not in options:
            raise ValueError("the service's NATS URL names no user and password for its roles to connect with")
        options.update(user=identity(role), inbox_prefix=service_inbox(role))
    return options


def service_password(service_url: str) -> str:
    """The password in the service's NATS URL (its roles connect with it)."""
    return str(connect_options(service_url).get("password") or "")


async def connect_role(
    service_url: str, role: Role, *, scoped: bool, client: NATS | None = None, **options: Any
) -> NATS:
    """A role's connection (`client`, or a new one; nats.connect `options` besides), its
    first connect tried for ADMIT_WAIT seconds while the callout refuses it."""
    client = client or NATS()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ADMIT_WAIT
    while True:
        try:
            await client.connect(**role_connect_options(service_url, role, scoped=scoped), **options)
            return client
        except nats.errors.Error as refused:
            if "authorization violation" not in str(refused).lower() or not scoped or loop.time() > deadline:
                raise
            log.warning("service connection refused by the auth callout; trying again", extra={"role": role.value})
            await asyncio.sleep(ADMIT_RETRY)
