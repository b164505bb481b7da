"""The audit digest: a Merkle root over every stream's head hash as of one notification id.

The layout is documented in docs/architecture.md ("Audit: periodic digest"); it is the
RFC 6962 Merkle tree hash (leaf prefix 0x00, node prefix 0x01) over one leaf per stream,
so anyone holding a published root can recompute it from the events with a few lines.
"""

from __future__ import annotations

import hashlib
import struct
import uuid

from psycopg.sql import SQL

from adapters.store.postgres import PostgresTarget
from domain.digest import DIGEST_ID
from services.ports.digests import StoreDigest, StoreDigests

LEAF_PREFIX, NODE_PREFIX = b"\x00", b"\x01"
EMPTY_ROOT = hashlib.sha256(b"").digest()  # the root over no streams at all

# The digest stream itself is left out, so publishing a digest is not a change the next
# digest must cover (it would chase itself); its own hash chain protects it.
HEAD_POSITION = SQL(
    "SELECT coalesce(max(notification_id), 0) AS head FROM chronicle.events WHERE originator_id <> %s"
)
# The last notification id handed out, whether or not its event is still there: removing
# the store's latest events must not make a digest taken before look like one from the future.
ISSUED_POSITION = SQL(
    "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('chronicle.events', 'notification_id')::regclass), 0)"
)
STREAM_HEADS = SQL(
    "SELECT DISTINCT ON (originator_id) originator_id, originator_version, hash FROM chronicle.events"
    " WHERE notification_id <= %s AND originator_id <> %s ORDER BY originator_id, originator_version DESC"
)


def leaf_hash(stream: uuid.UUID, version: int, head: bytes) -> bytes:
    """sha256(0x00 || uuid 16 bytes || head version int8 big-endian || head hash 32 bytes)."""
    return hashlib.sha256(LEAF_PREFIX + stream.bytes + struct.pack(">q", version) + head).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """sha256(0x01 || left 32 bytes || right 32 bytes)."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


class MerkleRoot:
    """Takes leaves in order and keeps only the roots of the complete subtrees so far
    (largest first), so memory is O(log n) however many streams there are. The root is
    the tree built level by level, pairing neighbours and promoting an odd last node."""

    def __init__(self) -> None:
        self._subtrees: list[tuple[int, bytes]] = []  # (leaf count, root)
        self.leaves = 0

    def add(self, leaf: bytes) -> None:
        size, digest = 1, leaf
        while self._subtrees and self._subtrees[-1][0] == size:
            _, left = self._subtrees.pop()
            size, digest = size * 2, node_hash(left, digest)
        self._subtrees.append((size, digest))
        self.leaves += 1

    def root(self) -> bytes:
        if not self._subtrees:
            return EMPTY_ROOT
        digest = self._subtrees[-1][1]
        for _, left in reversed(self._subtrees[:-1]):
            digest = node_hash(left, digest)
        return digest


def head_position(target: PostgresTarget) -> int:
    """The notification id of the latest event a digest would cover (0 for none)."""
    with target.connect() as conn:
        return conn.execute(HEAD_POSITION, (DIGEST_ID,)).fetchone()[0]  # type: ignore[index]


def issued_position(target: PostgresTarget) -> int:
    """The latest notification id the store has handed out (0 for none)."""
    with target.connect() as conn:
        return conn.execute(ISSUED_POSITION).fetchone()[0]  # type: ignore[index]


def compute_digest(target: PostgresTarget, position: int | None = None, *, batch_size: int = 10_000) -> StoreDigest:
    """The digest at `position` (default: the latest event's), read in one snapshot through a
    server-side cursor; blocking, so callers on an event loop run it in a thread."""
    tree = MerkleRoot()
    events = 0
    with target.connect() as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        # The heads come out of one sort over every event up to `position`; room for it in
        # memory keeps a store of millions of events from spilling to disk.
        conn.execute("SET LOCAL work_mem = '256MB'")
        if position is None:
            position = conn.execute(HEAD_POSITION, (DIGEST_ID,)).fetchone()[0]  # type: ignore[index]
        with conn.cursor(name="chronicle_audit_digest") as cursor:
            cursor.itersize = batch_size
            cursor.execute(STREAM_HEADS, (position, DIGEST_ID))
            previous: uuid.UUID | None = None
            while rows := cursor.fetchmany(batch_size):
                for stream, version, head in rows:
                    # Leaves go in UUID byte order; Postgres sorts uuid the same way, and a
                    # root over any other order would not be the documented one.
                    if previous is not None and stream <= previous:
                        raise RuntimeError("stream heads did not arrive in originator_id byte order")
                    tree.add(leaf_hash(stream, version, bytes(head)))
                    events += version
                    previous = stream
    return StoreDigest(position=position, root=tree.root(), streams=tree.leaves, events=events)


class PostgresDigests(StoreDigests):
    """The digest port on one database."""

    def __init__(self, target: PostgresTarget) -> None:
        self.target = target

    def head(self) -> int:
        return head_position(self.target)

    def digest_at(self, position: int) -> StoreDigest:
        return compute_digest(self.target, position)
