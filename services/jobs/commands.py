"""Command handlers of artifact generation jobs: the request, and each step a worker records."""

from __future__ import annotations

from typing import Any

from chronicle_contract.jobs import FailJob, JobPhase, JobRequested, JobStep, RecordJob, RecordOutcomes

from domain.artifact import Artifact
from domain.job import Chunk, Job, request_fingerprint
from domain.job_output import artifact_of
from domain.job_slot import JobSlot
from services.runtime.sessions import session_for
from services.runtime.unit_of_work import UnitOfWork


def state(job: Job) -> dict[str, Any]:
    return {"job_id": job.id, "session_id": job.session_id, "status": job.status, "progress": job.progress}


def request_job(cmd: RecordJob, uow: UnitOfWork) -> JobRequested:
    """A new job, unless one with the same fingerprint is still active: then that one."""
    session = session_for(cmd.session_id, uow)
    fingerprint = request_fingerprint(uow.user_id, session.id, cmd.artifact_type, cmd.source_ids, cmd.options)
    slot = uow.find_unless_new(JobSlot, JobSlot.id_for(fingerprint))  # most requests are new ones
    if slot is not None and slot.active_job_id is not None:
        active = uow.get(Job, slot.active_job_id)
        if active.is_active():
            return JobRequested(**state(active), created=False)
    job = uow.add(
        Job.request(
            id=uow.new_id(),
            owner=uow.user_id,
            at=uow.now,
            session_id=session.id,
            artifact_type=cmd.artifact_type,
            content=cmd.content,
            options=cmd.options,
            source_ids=cmd.source_ids,
            snapshot=[Chunk.model_validate(chunk.model_dump()) for chunk in cmd.snapshot],
        )
    )
    slot = slot or uow.add(JobSlot.open(owner=uow.user_id, fingerprint=fingerprint, at=uow.now))
    slot.claim(at=uow.now, job_id=job.id)
    return JobRequested(**state(job), created=True)


def next_step(job: Job, worker: str, uow: UnitOfWork, **extra: Any) -> JobPhase:
    """The phase the worker now holds, with what it needs to run it (None: the job ended).
    Each outcome a worker records starts its next phase in the same commit."""
    return describe(job, job.start_phase(at=uow.now, worker=worker), **extra)


def describe(job: Job, phase: str | None, **extra: Any) -> JobPhase:
    spec = {"artifact_type": job.artifact_type, "content": job.content, "options": job.options}
    snapshot = [chunk.model_dump(mode="json") for chunk in job.snapshot] if phase else []
    return JobPhase(**state(job), phase=phase, attempt=job.attempt, spec=spec, snapshot=snapshot, plan=job.plan,
                    result=job.result, **extra)


def start_phase(cmd: JobStep, uow: UnitOfWork) -> JobPhase:
    return next_step(uow.get(Job, cmd.job_id), cmd.worker, uow)


def describe_job(cmd: JobStep, uow: UnitOfWork) -> JobPhase:
    """What a worker needs to run the job's next phase, recording nothing: a pending job is
    claimed by the first outcome recorded for it (claim_if_pending)."""
    job = uow.get(Job, cmd.job_id)
    return describe(job, job.next_phase())


def claim_if_pending(job: Job, worker: str, uow: UnitOfWork) -> None:
    """A job nobody has started yet is started for this worker with what it records; one
    another worker holds must be taken over explicitly (job.start_phase), on the record."""
    if job.status == "pending":
        job.start_phase(at=uow.now, worker=worker)


def record_outcomes(cmd: RecordOutcomes, uow: UnitOfWork) -> JobPhase:
    """Each outcome given, in phase order, each starting the next phase: a worker whose
    agent is quick records planning, generating and validating in one commit."""
    job = uow.get(Job, cmd.job_id)
    claim_if_pending(job, cmd.worker, uow)
    artifact = None
    if cmd.plan is not None:
        job.store_plan(at=uow.now, worker=cmd.worker, plan=cmd.plan)
        job.start_phase(at=uow.now, worker=cmd.worker)
    if cmd.result is not None:
        job.store_result(at=uow.now, worker=cmd.worker, result=cmd.result)
        job.start_phase(at=uow.now, worker=cmd.worker)
    if cmd.problems is not None:
        artifact = finish(job, cmd.worker, cmd.problems, uow)
    return next_step(job, cmd.worker, uow, artifact_id=artifact.id if artifact else None)


def release(job: Job, uow: UnitOfWork) -> None:
    """An ended job frees its fingerprint: the same request makes a new job from now on."""
    uow.get(JobSlot, JobSlot.id_for(job.fingerprint)).release(at=uow.now, job_id=job.id)


def finish(job: Job, worker: str, problems: list[str], uow: UnitOfWork) -> Artifact | None:
    """Validation's outcome; a valid result becomes an artifact linked to the job."""
    job.check_phase("validating", worker)
    artifact = None
    if not problems and job.result is not None:
        layout, draft = artifact_of(job.artifact_type, job.result)
        artifact = uow.add(
            Artifact.store(
                id=uow.new_id(),
                owner=uow.user_id,
                at=uow.now,
                session_id=job.session_id,
                parent=None,
                layout=layout,
                query=job.content,
                draft=draft,
                origin="job",
                job_id=job.id,
                tags=[job.artifact_type],
            )
        )
    job.finish(at=uow.now, worker=worker, problems=problems, artifact_id=artifact.id if artifact else None)
    if not job.is_active():
        release(job, uow)
    return artifact


def fail_job(cmd: FailJob, uow: UnitOfWork) -> JobPhase:
    job = uow.get(Job, cmd.job_id)
    claim_if_pending(job, cmd.worker, uow)
    job.fail(at=uow.now, worker=cmd.worker, reason=cmd.reason)
    release(job, uow)
    return next_step(job, cmd.worker, uow)
