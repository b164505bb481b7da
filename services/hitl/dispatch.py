"""Human in the loop's dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.hitl import ExpireRun, GetRun, ListRuns, PauseRun, RecordTaken, ResumeRun, TakeAnswer

from services.hitl import commands, queries
from services.hitl.answers import Answers
from services.runtime.dispatch import Internal, Read, Routes, Serve

ROUTES: Routes = {
    PauseRun: commands.pause_run,
    ResumeRun: commands.resume_run,
    # The answer's content is read from the conversation for whoever takes it.
    TakeAnswer: Serve(Answers.take, on=Answers),
    GetRun: Read(queries.get_run, reads=("hitl",)),
    ListRuns: Read(queries.list_runs, reads=("hitl",)),
}

# Issued by the expiry sweeper (hitl/coordinator.py) and by hitl.take (hitl/answers.py).
INTERNAL: Internal = {ExpireRun: commands.expire_run, RecordTaken: commands.record_taken}
