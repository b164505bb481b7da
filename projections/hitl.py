"""HITL read model: every checkpoint of every run, for hitl.get, hitl.list and expiry."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from domain.conversation import Conversation
from domain.hitl import HitlExpired, HitlPaused, HitlResumed
from projections.base import Projection, handles
from projections.batch import Batch


class HitlProjection(Projection):
    name = "hitl"
    version = 2  # 2: a run is its owner's (checkpoints keyed by conversation, run id and seq)
    tables = """
    CREATE TABLE {schema}.conversations (
        id uuid PRIMARY KEY,
        owner text NOT NULL
    );
    CREATE TABLE {schema}.checkpoints (
        run_id text NOT NULL,
        seq bigint NOT NULL,
        owner text NOT NULL,
        conversation_id uuid NOT NULL,
        step text NOT NULL,
        checkpoint_type text NOT NULL,
        prompt text NOT NULL,
        data jsonb NOT NULL,
        conversation_mode boolean NOT NULL,
        status text NOT NULL,
        paused_at timestamptz NOT NULL,
        expires_at timestamptz,
        resumed_at timestamptz,
        expired_at timestamptz,
        approved boolean,
        edits jsonb,
        feedback text,
        PRIMARY KEY (conversation_id, run_id, seq)
    );
    CREATE INDEX ON {schema}.checkpoints (owner, run_id, seq);
    CREATE INDEX ON {schema}.checkpoints (owner, status, paused_at);
    CREATE INDEX ON {schema}.checkpoints (conversation_id);
    CREATE INDEX ON {schema}.checkpoints (expires_at) WHERE status = 'paused' AND expires_at IS NOT NULL
    """

    erasure = """
    DELETE FROM {schema}.checkpoints WHERE owner = %(owner)s;
    DELETE FROM {schema}.conversations WHERE owner = %(owner)s
    """

    @handles(Conversation.Started)
    def started(self, batch: Batch, e: Conversation.Started, _: int) -> None:
        batch.execute(self.sql("INSERT INTO {schema}.conversations (id, owner) VALUES (%s, %s)"), (e.originator_id, e.owner))

    @handles(HitlPaused)
    def paused(self, batch: Batch, e: HitlPaused, _: int) -> None:
        batch.execute(
            self.sql(
                "INSERT INTO {schema}.checkpoints (run_id, seq, owner, conversation_id, step, checkpoint_type,"
                " prompt, data, conversation_mode, status, paused_at, expires_at)"
                " SELECT %s, %s, c.owner, c.id, %s, %s, %s, %s, %s, 'paused', %s, %s"
                " FROM {schema}.conversations c WHERE c.id = %s"
            ),
            (
                e.run_id,
                e.originator_version,
                e.step,
                e.checkpoint_type,
                e.prompt,
                Jsonb(e.data),
                e.conversation_mode,
                e.timestamp,
                e.expires_at,
                e.originator_id,
            ),
        )

    def _latest(self) -> str:
        return (
            "(SELECT max(seq) FROM {schema}.checkpoints WHERE conversation_id = %(conversation_id)s"
            " AND run_id = %(run_id)s)"
        )

    @handles(HitlResumed)
    def resumed(self, batch: Batch, e: HitlResumed, _: int) -> None:
        batch.execute(
            self.sql(
                "UPDATE {schema}.checkpoints SET status = 'resumed', resumed_at = %(at)s, approved = %(approved)s,"
                " edits = %(edits)s, feedback = %(feedback)s"
                " WHERE conversation_id = %(conversation_id)s AND run_id = %(run_id)s AND seq = " + self._latest()
            ),
            {"at": e.timestamp, "approved": e.approved, "edits": Jsonb(e.edits), "feedback": e.feedback,
             "run_id": e.run_id, "conversation_id": e.originator_id},
        )

    @handles(HitlExpired)
    def expired(self, batch: Batch, e: HitlExpired, _: int) -> None:
        batch.execute(
            self.sql(
                "UPDATE {schema}.checkpoints SET status = 'expired', expired_at = %(at)s"
                " WHERE conversation_id = %(conversation_id)s AND run_id = %(run_id)s AND seq = " + self._latest()
            ),
            {"at": e.timestamp, "run_id": e.run_id, "conversation_id": e.originator_id},
        )

    @handles(Conversation.Deleted)
    def deleted(self, batch: Batch, e: Conversation.Deleted, _: int) -> None:
        batch.execute(self.sql("DELETE FROM {schema}.checkpoints WHERE conversation_id = %s"), (e.originator_id,))
        batch.execute(self.sql("DELETE FROM {schema}.conversations WHERE id = %s"), (e.originator_id,))
