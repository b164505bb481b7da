"""The stats read model's Postgres view (projections/stats.py): its tables and the statements its writes batch into.

Tags are counted by their blind terms (services/ports/sealing.py `tag_terms`); each tag's
name is kept sealed under its owner's key beside its count, and opened by the query.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Cursor

from adapters.read_side.batch import Rows, Totals, columns
from adapters.read_side.sealing import Owners, UserSeal
from adapters.read_side.view import PostgresView
from projections.stats import StatsView
from services.ports.sealing import tag_terms


def sealed_tags(seal: UserSeal | None, tags: list[str]) -> list[tuple[str, bytes]]:
    """Each tag's (term, sealed name); the name is sealed for the term, so every write of
    one tag of one owner gives the same bytes. None for an erased owner's: no tags."""
    if seal is None:
        return []
    return [(term, seal.seal(f"tag:{term}", tag)) for term, tag in zip(tag_terms(seal, tags), tags, strict=True)]


class PostgresStatsView(PostgresView, StatsView):
    tables = """
    CREATE TABLE {schema}.users (
        owner text PRIMARY KEY,
        conversations integer NOT NULL DEFAULT 0,
        messages bigint NOT NULL DEFAULT 0
    );
    CREATE TABLE {schema}.conversations (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        tags text[] NOT NULL,  -- blind terms
        message_count integer NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.conversations (owner, created_at);
    -- Counts may fall to zero: readers skip those rows, writers never delete them.
    CREATE TABLE {schema}.tags (
        owner text NOT NULL,
        term text NOT NULL,
        tag bytea NOT NULL,  -- sealed
        count integer NOT NULL,
        PRIMARY KEY (owner, term)
    );
    ALTER TABLE {schema}.conversations ALTER COLUMN tags SET STATISTICS 0;
    ALTER TABLE {schema}.tags ALTER COLUMN term SET STATISTICS 0, ALTER COLUMN tag SET STATISTICS 0;
    CREATE INDEX ON {schema}.tags (owner, count DESC);
    -- total_tokens counts every artifact ever stored in the session (tokens spent stay
    -- spent), artifact_count only those not removed by retention.
    CREATE TABLE {schema}.sessions (
        session_id uuid PRIMARY KEY,
        owner text NOT NULL,
        artifact_count integer NOT NULL,
        total_tokens bigint NOT NULL
    )
    """

    erasure = """
    DELETE FROM {schema}.tags WHERE owner = %(owner)s;
    DELETE FROM {schema}.conversations WHERE owner = %(owner)s;
    DELETE FROM {schema}.users WHERE owner = %(owner)s;
    DELETE FROM {schema}.sessions WHERE owner = %(owner)s
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.conversations_started = Totals(lambda a, b: a + b, self._count_started)
        self.new_conversations = Rows(self.copier("{schema}.conversations", "id, owner, tags, created_at"))
        self.owners = Owners(self.sql("SELECT id, owner FROM {schema}.conversations WHERE id = ANY(%s)"))
        # Per (owner, term): (conversations added, sealed name).
        self.tags_started = Totals(lambda a, b: (a[0] + b[0], a[1]), self._count_started_tags)
        self.messages_added = Totals(lambda a, b: a + b, self._add_messages)
        # Per (session, owner): (artifacts added or removed, tokens).
        self.session_artifacts = Totals(lambda a, b: (a[0] + b[0], a[1] + b[1]), self._count_artifacts)
        self.sinks = [
            self.conversations_started,
            self.new_conversations,
            self.tags_started,
            self.messages_added,
            self.session_artifacts,
        ]

    def count_conversations(self, owner: str, added: int) -> None:
        self.batch.accumulate(self.conversations_started, owner, added)

    def add_conversation(self, conversation_id: UUID, owner: str, tags: list[str], at: datetime) -> None:
        self.owners.remember(conversation_id, owner)
        seal = self.seals.for_writing(owner)
        terms = [term for term, _ in sealed_tags(seal, tags)]
        self.batch.append(self.new_conversations, (conversation_id, owner, terms, at))

    def count_tag(self, owner: str, tag: str, added: int) -> None:
        for term, name in sealed_tags(self.seals.for_writing(owner), [tag]):
            self.batch.accumulate(self.tags_started, (owner, term), (added, name))

    def count_messages(self, conversation_id: UUID, added: int) -> None:
        self.batch.accumulate(self.messages_added, conversation_id, added)

    def count_session_artifacts(self, session_id: UUID, owner: str, artifacts: int, tokens: int) -> None:
        self.batch.accumulate(self.session_artifacts, (session_id, owner), (artifacts, tokens))

    def retag_conversation(self, conversation_id: UUID, tags: list[str]) -> None:
        # The old tags live in this read model's own row, read inside the same statement.
        self.batch.execute(
            self.sql(
                "WITH old AS (SELECT owner, unnest(tags) AS term FROM {schema}.conversations WHERE id = %s)"
                " UPDATE {schema}.tags t SET count = t.count - 1 FROM old"
                " WHERE t.owner = old.owner AND t.term = old.term"
            ),
            (conversation_id,),
        )
        owner = self.owners.of(self.batch.cursor, [conversation_id]).get(conversation_id)
        new = sealed_tags(self.seals.for_writing(owner), tags) if owner is not None else []
        self.batch.execute(
            self.sql(
                "WITH c AS (UPDATE {schema}.conversations SET tags = %s WHERE id = %s RETURNING owner)"
                " INSERT INTO {schema}.tags (owner, term, tag, count) SELECT c.owner, t.term, t.tag, 1"
                " FROM c, unnest(%b::text[], %b::bytea[]) AS t(term, tag)"
                " ON CONFLICT (owner, term) DO UPDATE SET count = {schema}.tags.count + 1"
            ),
            ([term for term, _ in new], conversation_id, *columns(new, 2)),
        )

    def delete_conversation(self, conversation_id: UUID) -> None:
        self.batch.execute(
            self.sql(
                "WITH gone AS (DELETE FROM {schema}.conversations WHERE id = %s RETURNING owner, tags, message_count),"
                " users AS (UPDATE {schema}.users u SET conversations = u.conversations - 1,"
                " messages = u.messages - gone.message_count FROM gone WHERE u.owner = gone.owner)"
                " UPDATE {schema}.tags t SET count = t.count - 1 FROM gone"
                " WHERE t.owner = gone.owner AND t.term = ANY(gone.tags)"
            ),
            (conversation_id,),
        )

    def _count_artifacts(self, cur: Cursor[Any], items: list[tuple[tuple[Any, str], tuple[int, int]]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.sessions (session_id, owner, artifact_count, total_tokens)"
                " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::int[], %b::bigint[])"
                " ON CONFLICT (session_id) DO UPDATE SET"
                " artifact_count = {schema}.sessions.artifact_count + excluded.artifact_count,"
                " total_tokens = {schema}.sessions.total_tokens + excluded.total_tokens"
            ),
            columns([(session, owner, n, tokens) for (session, owner), (n, tokens) in items], 4),
            prepare=True,
        )

    def _count_started(self, cur: Cursor[Any], items: list[tuple[str, int]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.users (owner, conversations) SELECT * FROM unnest(%b::text[], %b::int[])"
                " ON CONFLICT (owner) DO UPDATE SET conversations = {schema}.users.conversations + excluded.conversations"
            ),
            columns(items, 2),
            prepare=True,
        )

    def _count_started_tags(self, cur: Cursor[Any], items: list[tuple[tuple[str, str], tuple[int, bytes]]]) -> None:
        cur.execute(
            self.sql(
                "INSERT INTO {schema}.tags (owner, term, tag, count)"
                " SELECT * FROM unnest(%b::text[], %b::text[], %b::bytea[], %b::int[])"
                " ON CONFLICT (owner, term) DO UPDATE SET count = {schema}.tags.count + excluded.count"
            ),
            columns([(owner, term, name, n) for (owner, term), (n, name) in items], 4),
            prepare=True,
        )

    def _add_messages(self, cur: Cursor[Any], items: list[tuple[Any, int]]) -> None:
        cur.execute(
            self.sql(
                "WITH added AS (SELECT * FROM unnest(%b::uuid[], %b::int[]) AS a(id, n)),"
                " counted AS (UPDATE {schema}.conversations c SET message_count = c.message_count + added.n"
                " FROM added WHERE c.id = added.id RETURNING c.owner, added.n)"
                " UPDATE {schema}.users u SET messages = u.messages + per_owner.n"
                " FROM (SELECT owner, sum(n) AS n FROM counted GROUP BY owner) per_owner"
                " WHERE u.owner = per_owner.owner"
            ),
            columns(items, 2),
            prepare=True,
        )
