"""Query handlers of generation jobs, scoped to the caller like every query."""

from __future__ import annotations

from typing import Any

from chronicle_contract.base import Page
from chronicle_contract.jobs import GetJob, JobView, ListJobs
from psycopg.sql import SQL

from services.ports.read_models import Queries, not_found
from services.ports.sealing import UserSeal
from services.runtime.paging import Order, page_of
from services.runtime.replies import Wire

COLUMNS = (
    "id AS job_id, session_id, artifact_type, status, progress, attempt, plan, result, error, artifact_id,"
    " snapshot_chunks, created_at, updated_at"
)


async def get(queries: Queries, user: str, q: GetJob) -> Wire[JobView]:
    row = await queries.fetch_one("SELECT " + COLUMNS + " FROM rm_jobs.jobs WHERE id = %s AND owner = %s", (q.job_id, user))
    seal = await queries.sealing.of(user) if row is not None else None
    if row is None or seal is None:
        raise not_found("job", q.job_id)
    return Wire(opened_job(seal, row))


async def list_jobs(queries: Queries, user: str, q: ListJobs) -> Wire[Page[JobView]]:
    conditions = [SQL("owner = %(user)s")]
    if q.session_id is not None:
        conditions.append(SQL("session_id = %(session)s"))
    if q.status is not None:
        conditions.append(SQL("status = %(status)s"))
    inner = SQL(
        "SELECT " + COLUMNS + ", created_at AS page_key, id AS page_id FROM rm_jobs.jobs WHERE {where}"
    ).format(where=SQL(" AND ").join(conditions))
    params = {"user": user, "session": q.session_id, "status": q.status}
    page = await page_of(queries, user, NEWEST_JOBS, inner, params, limit=q.limit, offset=q.offset, cursor=q.cursor)
    seal = await queries.sealing.of(user) if page["items"] else None
    page["items"] = [opened_job(seal, row) for row in page["items"] if seal is not None]
    return Wire(page)


def opened_job(seal: UserSeal, row: dict[str, Any]) -> dict[str, Any]:
    """A job row's sealed columns opened, in place."""
    row["plan"], row["result"], row["error"] = seal.open_json(row["plan"]), seal.open_json(row["result"]), seal.open(row["error"])
    return row


NEWEST_JOBS = Order("jobs", "timestamptz")
