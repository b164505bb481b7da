"""The history read model's conversations are updated in place by each message: HOT
updates, which add no entry to any index (the projection's largest cost per message
when an index held updated_at)."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from chronicle_client.connection import ChronicleClient

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import Chronicle
from tests.waiting import wait_until

MESSAGES = 12


def updates(url: str) -> tuple[int, int]:
    """(row updates, of which HOT) of rm_history.conversations, as the statistics have them."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
            " WHERE schemaname = 'rm_history' AND relname = 'conversations'"
        ).fetchone()
    assert row is not None
    return row[0], row[1]


@pytest.mark.timeout(120)
async def test_each_message_updates_its_conversation_without_touching_an_index(
    instance: tuple[Chronicle, str], authority: TokenAuthority
) -> None:
    chronicle, url = instance
    client = await ChronicleClient.connect(
        chronicle.nats_url, authority.issue(f"u-{uuid.uuid4().hex}"), prefix=chronicle.settings.subject_prefix
    )
    started = await client.conversations.start(title="in place")
    for n in range(MESSAGES):
        await client.conversations.add_message(started.conversation_id, "user", f"message {n}")
        # (read back: each message's update is its own batch, not one for all of them)
        await client.conversations.get(started.conversation_id)
    got = await client.conversations.get(started.conversation_id)
    await client.close()
    assert got.message_count == MESSAGES

    # Statistics reach the view a second or ten after the projection's backend is idle.
    wait_until(lambda: updates(url)[0] >= MESSAGES, "the history's updates counted", timeout=60)
    total, hot = updates(url)
    assert hot == total, f"{total - hot} of {total} updates of a conversation wrote index entries"
