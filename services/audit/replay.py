"""`chronicle replay ID`: one aggregate's events, and its state at a version or time, in the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson
from chronicle_contract.audit import AuditStream
from chronicle_contract.errors import ChronicleError

from services.audit.queries import Audit
from services.ports.audit import EVENT_COLUMNS, EventDecoder
from services.ports.read_models import Queries

PAYLOAD_WIDTH = 100


async def replay(
    queries: Queries, decoder: EventDecoder, aggregate_id: UUID, at_version: int | None, at_time: datetime | None
) -> str:
    """Every event of the aggregate (an operator at the CLI reads as its owner), then the
    state at the point asked for; raises ChronicleError(not_found) for an unknown id."""
    async def no_record(*_: Any) -> None:  # never called: the owner reads their own stream
        raise AssertionError("an owner's read is not recorded")

    audit = Audit(queries, no_record, decoder)
    owner = await owner_of(audit, aggregate_id)
    pages = []
    after = 0
    while True:
        page = await audit.stream(owner, AuditStream(
            aggregate_id=aggregate_id, after_version=after, limit=1_000, at_version=at_version, at_time=at_time
        ))
        pages.append(page)
        if page["next_after_version"] is None:
            break
        after = page["next_after_version"]
    return render(pages)


async def owner_of(audit: Audit, aggregate_id: UUID) -> str:
    row = await audit.queries.fetch_one(
        f"SELECT {EVENT_COLUMNS} FROM chronicle.events WHERE originator_id = %s AND originator_version = 1",
        (aggregate_id,),
    )
    if row is None:
        raise ChronicleError("not_found", f"aggregate {aggregate_id} not found")
    return audit.decoder.owner_and_type(row)[0]


def render(pages: Sequence[dict[str, Any]]) -> str:
    head = pages[0]
    events = [e for page in pages for e in page["events"]]
    lines = [
        f"{head['aggregate_type']} {head['aggregate_id']} (owner {head['owner']}): {len(events)} events",
        "",
        f"{'version':>7}  {'position':>9}  {'timestamp':<32}  {'event':<28}  payload",
    ]
    for e in events:
        payload = orjson.dumps(e["payload"]).decode()
        if len(payload) > PAYLOAD_WIDTH:
            payload = payload[: PAYLOAD_WIDTH - 1] + "…"
        lines.append(f"{e['version']:>7}  {e['position']:>9}  {str(e['timestamp']):<32}  {e['type']:<28}  {payload}")
    if "state" in head:
        lines += ["", f"state at version {head['state_version']}:"]
        lines.append(orjson.dumps(head["state"], option=orjson.OPT_INDENT_2).decode() if head["state"] else "(none yet)")
    return "\n".join(lines)
