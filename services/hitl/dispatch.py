"""Human in the loop's dispatch table: each request type and what serves it."""

from __future__ import annotations

from services.contract.hitl import ExpireRun, GetRun, ListRuns, PauseRun, ResumeRun
from services.hitl import commands, queries
from services.runtime.dispatch import Internal, Read, Routes

ROUTES: Routes = {
    PauseRun: commands.pause_run,
    ResumeRun: commands.resume_run,
    GetRun: Read(queries.get_run, reads=("hitl",)),
    ListRuns: Read(queries.list_runs, reads=("hitl",)),
}

# Issued by the expiry sweeper (hitl/coordinator.py).
INTERNAL: Internal = {ExpireRun: commands.expire_run}
