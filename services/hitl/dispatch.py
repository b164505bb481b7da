"""Human in the loop's dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.hitl import ExpireRun, GetRun, ListRuns, PauseRun, RecordTaken, ResumeRun, TakeAnswer

from services.hitl import commands, queries
from services.hitl.answers import Answers
from services.runtime.dispatch import Decide, Read, Serve

ROUTES = (
    Decide(PauseRun, commands.pause_run),
    Decide(ResumeRun, commands.resume_run),
    # The answer's content is read from the conversation for whoever takes it.
    Serve(TakeAnswer, Answers.take, on=Answers),
    Read(GetRun, queries.get_run, reads=("hitl",)),
    Read(ListRuns, queries.list_runs, reads=("hitl",)),
)

# Issued by the expiry sweeper (hitl/coordinator.py) and by hitl.take (hitl/answers.py).
INTERNAL = (Decide(ExpireRun, commands.expire_run), Decide(RecordTaken, commands.record_taken))
