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
from services.jobs.request import Jobs
from services.runtime.dispatch import Internal, Read, Routes, Serve

ROUTES: Routes = {
    RequestJob: Serve(Jobs.request, on=Jobs),  # the retrieval snapshot first, then the bus records the job
    GetJob: Read(queries.get, reads=("jobs",)),
    ListJobs: Read(queries.list_jobs, reads=("jobs",)),
}

# Run by the job request and the workers, never straight from NATS.
INTERNAL: Internal = {
    RecordJob: commands.request_job,
    StartPhase: commands.start_phase,
    DescribeJob: commands.describe_job,
    RecordOutcomes: commands.record_outcomes,
    FailJob: commands.fail_job,
}
