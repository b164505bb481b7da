"""The digest's Merkle tree against trees built by hand, and the AuditDigest aggregate's rules."""

from __future__ import annotations

import hashlib
import struct
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from adapters.store.digest import EMPTY_ROOT, MerkleRoot, leaf_hash, node_hash
from domain.digest import DIGEST_ID, SYSTEM_OWNER, AuditDigest
from domain.errors import InvalidCommand

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def root_of(leaves: list[bytes]) -> bytes:
    tree = MerkleRoot()
    for leaf in leaves:
        tree.add(leaf)
    return tree.root()


def level_by_level(leaves: list[bytes]) -> bytes:
    """The documented construction, written the obvious way."""
    if not leaves:
        return sha256(b"")
    level = leaves
    while len(level) > 1:
        paired = [sha256(b"\x01" + level[i] + level[i + 1]) for i in range(0, len(level) - 1, 2)]
        level = paired + ([level[-1]] if len(level) % 2 else [])
    return level[0]


def test_leaf_and_node_layout() -> None:
    stream, head = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff"), bytes(range(32))
    assert leaf_hash(stream, 7, head) == sha256(
        b"\x00" + bytes.fromhex("00112233445566778899aabbccddeeff") + b"\x00" * 7 + b"\x07" + head
    )
    assert node_hash(b"L" * 32, b"R" * 32) == sha256(b"\x01" + b"L" * 32 + b"R" * 32)


def test_root_matches_trees_built_by_hand() -> None:
    a, b, c, d, e = (sha256(bytes([n])) for n in range(5))

    def node(left: bytes, right: bytes) -> bytes:
        return sha256(b"\x01" + left + right)

    assert root_of([]) == EMPTY_ROOT == sha256(b"")
    assert root_of([a]) == a
    assert root_of([a, b]) == node(a, b)
    assert root_of([a, b, c]) == node(node(a, b), c)  # c promoted
    assert root_of([a, b, c, d]) == node(node(a, b), node(c, d))
    assert root_of([a, b, c, d, e]) == node(node(node(a, b), node(c, d)), e)


@pytest.mark.parametrize("count", range(0, 70))
def test_streaming_root_is_the_level_by_level_root(count: int) -> None:
    leaves = [sha256(struct.pack(">q", n)) for n in range(count)]
    assert root_of(leaves) == level_by_level(leaves)


def test_digest_records_a_position_once() -> None:
    digest = AuditDigest.open(at=T0)
    assert (digest.id, digest.owner, digest.position) == (DIGEST_ID, SYSTEM_OWNER, 0)
    assert digest.publish(at=T0, position=10, root="ab" * 32, streams=2, events=5)
    # Another instance's digest at the same or an earlier position adds nothing.
    assert not digest.publish(at=T0, position=10, root="cd" * 32, streams=2, events=5)
    assert not digest.publish(at=T0, position=9, root="cd" * 32, streams=2, events=5)
    assert digest.publish(at=T0 + timedelta(hours=1), position=12, root="ef" * 32, streams=3, events=6)
    published = [e for e in digest.collect_events() if isinstance(e, AuditDigest.Published)]
    assert [(e.position, e.root) for e in published] == [(10, "ab" * 32), (12, "ef" * 32)]
    assert digest.position == 12


@pytest.mark.parametrize(
    "fields",
    [
        {"position": 1, "root": "AB" * 32, "streams": 1, "events": 1},
        {"position": 1, "root": "ab" * 31, "streams": 1, "events": 1},
        {"position": 0, "root": "ab" * 32, "streams": 0, "events": 0},
        {"position": 5, "root": "ab" * 32, "streams": 3, "events": 2},
    ],
)
def test_malformed_digest_is_refused(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidCommand):
        AuditDigest.open(at=T0).publish(at=T0, **fields)  # type: ignore[arg-type]
