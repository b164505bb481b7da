"""The HITL read model's Postgres view (projections/hitl.py): conversations' owners and every checkpoint.

A checkpoint's step, prompt, data, edits and feedback are sealed under the owner's key
(adapters/read_side/sealing.py) and opened by the query that reads them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from adapters.read_side.batch import Rows
from adapters.read_side.sealing import Owners, UserSeal
from adapters.read_side.view import PostgresView
from projections.hitl import HitlView

LATEST = (
    "(SELECT max(seq) FROM {schema}.checkpoints WHERE conversation_id = %(conversation_id)s AND run_id = %(run_id)s)"
)


class PostgresHitlView(PostgresView, HitlView):
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
        step bytea,  -- sealed (NULL: the owner was erased before the row was written)
        checkpoint_type text NOT NULL,
        prompt bytea,
        data bytea,
        conversation_mode boolean NOT NULL,
        status text NOT NULL,
        paused_at timestamptz NOT NULL,
        expires_at timestamptz,
        resumed_at timestamptz,
        expired_at timestamptz,
        approved boolean,
        edits bytea,
        feedback bytea,
        PRIMARY KEY (conversation_id, run_id, seq)
    );
    ALTER TABLE {schema}.checkpoints ALTER COLUMN step SET STATISTICS 0, ALTER COLUMN prompt SET STATISTICS 0,
        ALTER COLUMN data SET STATISTICS 0, ALTER COLUMN edits SET STATISTICS 0, ALTER COLUMN feedback SET STATISTICS 0;
    CREATE INDEX ON {schema}.checkpoints (owner, run_id, seq);
    CREATE INDEX ON {schema}.checkpoints (owner, status, paused_at);
    CREATE INDEX ON {schema}.checkpoints (conversation_id);
    CREATE INDEX ON {schema}.checkpoints (expires_at) WHERE status = 'paused' AND expires_at IS NOT NULL
    """

    erasure = """
    DELETE FROM {schema}.checkpoints WHERE owner = %(owner)s;
    DELETE FROM {schema}.conversations WHERE owner = %(owner)s
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.owners = Owners(self.sql("SELECT id, owner FROM {schema}.conversations WHERE id = ANY(%s)"))
        # (a batch's new conversations in one COPY: every conversation started is one row here)
        self.new_conversations = Rows(self.copier("{schema}.conversations", "id, owner"))
        self.sinks = [self.new_conversations]

    def _seal_of(self, conversation_id: UUID) -> UserSeal | None:
        self.batch.flush()
        owner = self.owners.of(self.batch.cursor, [conversation_id]).get(conversation_id)
        return self.seals.for_writing(owner) if owner is not None else None

    def add_conversation(self, conversation_id: UUID, owner: str) -> None:
        self.owners.remember(conversation_id, owner)
        self.batch.append(self.new_conversations, (conversation_id, owner))

    def pause(
        self, conversation_id: UUID, run_id: str, seq: int, step: str, checkpoint_type: str, prompt: str,
        data: dict[str, Any], conversation_mode: bool, at: datetime, expires_at: datetime | None,
    ) -> None:
        seal = self._seal_of(conversation_id)
        row = f"checkpoint:{conversation_id}:{seq}:"
        step_, prompt_, data_ = (
            (seal.seal(row + "step", step), seal.seal(row + "prompt", prompt), seal.seal_json(row + "data", data))
            if seal is not None else (None, None, None)
        )
        self.batch.execute(
            self.sql(
                "INSERT INTO {schema}.checkpoints (run_id, seq, owner, conversation_id, step, checkpoint_type,"
                " prompt, data, conversation_mode, status, paused_at, expires_at)"
                " SELECT %s, %s, c.owner, c.id, %s, %s, %s, %s, %s, 'paused', %s, %s"
                " FROM {schema}.conversations c WHERE c.id = %s"
            ),
            (run_id, seq, step_, checkpoint_type, prompt_, data_, conversation_mode, at, expires_at, conversation_id),
        )

    def resume(
        self, conversation_id: UUID, run_id: str, approved: bool, edits: Any, feedback: str | None, at: datetime
    ) -> None:
        # (sealed for the run's answer, which is its latest checkpoint's: the run and time name it)
        seal = self._seal_of(conversation_id)
        row = f"answer:{conversation_id}:{run_id}:{at.isoformat()}:"
        edits_ = seal.seal_json(row + "edits", edits) if seal is not None else None
        feedback_ = seal.seal(row + "feedback", feedback) if seal is not None and feedback is not None else None
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.checkpoints SET status = 'resumed', resumed_at = %(at)s, approved = %(approved)s,"
                " edits = %(edits)s, feedback = %(feedback)s"
                " WHERE conversation_id = %(conversation_id)s AND run_id = %(run_id)s AND seq = " + LATEST
            ),
            {"at": at, "approved": approved, "edits": edits_, "feedback": feedback_,
             "run_id": run_id, "conversation_id": conversation_id},
        )

    def expire(self, conversation_id: UUID, run_id: str, at: datetime) -> None:
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.checkpoints SET status = 'expired', expired_at = %(at)s"
                " WHERE conversation_id = %(conversation_id)s AND run_id = %(run_id)s AND seq = " + LATEST
            ),
            {"at": at, "run_id": run_id, "conversation_id": conversation_id},
        )

    def delete_conversation(self, conversation_id: UUID) -> None:
        self.batch.execute(self.sql("DELETE FROM {schema}.checkpoints WHERE conversation_id = %s"), (conversation_id,))
        self.batch.execute(self.sql("DELETE FROM {schema}.conversations WHERE id = %s"), (conversation_id,))
