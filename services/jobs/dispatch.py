"""Generation jobs' dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.jobs import (
    DescribeJob,
    FailJob,
    GetJob,
    ListJobs,
    RecordJob,
    RecordOutcomes,
    RequestJob,
    StartPhase,
)

from services.jobs import commands, queries
from services.jobs.request import JobRequests
from services.runtime.dispatch import Decide, Read, Serve

ROUTES = (
    Serve(RequestJob, JobRequests.request, on=JobRequests),  # the retrieval snapshot first, then the bus records the job
    Read(GetJob, queries.get, reads=("jobs",)),
    Read(ListJobs, queries.list_jobs, reads=("jobs",)),
)

# Run by the job request and the workers, never straight from NATS.
INTERNAL = (
    Decide(RecordJob, commands.request_job),
    Decide(StartPhase, commands.start_phase),
    Decide(DescribeJob, commands.describe_job),
    Decide(RecordOutcomes, commands.record_outcomes),
    Decide(FailJob, commands.fail_job),
)
