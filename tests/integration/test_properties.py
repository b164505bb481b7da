"""Property-based tests of the conversation contract, driven through ChronicleClient over real NATS and Postgres.

Every example acts as fresh users, so examples and tests never see one another's data.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import string
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any
from uuid import UUID

import orjson
import pytest
from chronicle_client import ChronicleClient, ChronicleError
from chronicle_contract.base import Role
from chronicle_contract.conversations import ConversationSummaryView, ConversationView, MessageView
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from adapters.auth import TokenAuthority
from domain.base import MAX_TAG_LENGTH
from domain.conversation import DERIVED_TITLE_MAX, derive_title
from entrypoints.bootstrap import bootstrap
from projections.history import FIRST_MESSAGE_PREVIEW
from tests.conftest import ClientFactory, make_settings
from tests.servers import TestServers

# Each example makes dozens of real round trips of a few milliseconds: small example counts
# and small data keep the whole file well under a minute.
PROPERTIES = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Nouns with no stemming surprises: each plural is the word plus "s" and indexes like the
# singular ("apples" and "apple" are both 'appl'), and no word begins another, so "the text
# mentions the word" is a case-insensitive prefix match at a word boundary.
VOCABULARY = (
    "apple", "zebra", "lamp", "river", "garden", "kettle", "violin",
    "lantern", "pebble", "wagon", "candle", "tiger", "mountain", "harbor",
)
TAGS = ("work", "home", "urgent", "later", "ideas")
ROLES = ("user", "agent", "system")
SORT_KEYS = ("created_at", "updated_at", "title")
# Stands for md5 of the victim's user id, which is only known once the example runs.
VICTIM_DIGEST = "{victim}"


def mentions(text: str, word: str) -> bool:
    return re.search(rf"\b{word}", text, re.IGNORECASE) is not None


def spoken(word: str, plural: bool, capitalised: bool) -> str:
    text = word + "s" if plural else word
    return text.capitalize() if capitalised else text


# --- what users write -----------------------------------------------------------------------

words = st.builds(spoken, st.sampled_from(VOCABULARY), st.booleans(), st.booleans())
sentences = st.lists(words, min_size=1, max_size=6).map(" ".join)
# Long, oddly spaced text makes derive_title fold whitespace and cut at a word.
rambling = st.lists(
    st.tuples(words, st.sampled_from([" ", "  ", "\t", "\n", "\u3000"])), min_size=1, max_size=25
).map(lambda pairs: "".join(word + gap for word, gap in pairs))
# NUL is left to the quarantined test at the end: it stalls the read models of the whole
# session, which would fail every later test for the wrong reason.
nul_free = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
free_text = st.text(nul_free, min_size=1, max_size=250).filter(str.strip)
# The search index marks each document with a lexeme made from md5(owner) and ANDs the
# caller's into every query: an author writing the victim's digest, bare or in the forms
# the index has used, must still not reach into the victim's results.
forged_lexemes = st.sampled_from([f"owner{VICTIM_DIGEST}", f"OWNER {VICTIM_DIGEST}", VICTIM_DIGEST])
hostile_sentences = st.lists(st.one_of(words, forged_lexemes), min_size=1, max_size=6).map(" ".join)
# Padding is stripped on the way in, so " work" and "work" are the same tag.
padded_tags = st.tuples(st.sampled_from(("", " ")), st.sampled_from(TAGS), st.sampled_from(("", " "))).map("".join)
tag_lists = st.lists(padded_tags, max_size=4)
tag_filters = st.lists(st.sampled_from(TAGS), max_size=3)
# Small values that survive any JSON store, so the tests using them fail only on their own
# property; test_json_fields_read_back_as_sent explores the full range.
tame_metadata = st.dictionaries(
    st.sampled_from(("source", "score", "lang", "step")),
    st.one_of(st.none(), st.booleans(), st.integers(-(2**31), 2**31), st.text(string.ascii_letters, max_size=8)),
    max_size=3,
)
json_text = st.text(nul_free, max_size=10)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),  # what orjson, and so the client, can send
        st.floats(allow_nan=False, allow_infinity=False),
        json_text,
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(json_text, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(json_text, json_values, max_size=4)


@dataclass(frozen=True)
class Said:
    role: Role
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    pinned: bool = False
    message_type: str = "text"


@dataclass(frozen=True)
class Planned:
    title: str | None = None
    tags: tuple[str, ...] = ()
    messages: tuple[Said, ...] = ()
    document_context: dict[str, Any] | None = None
    embedding_provider: str | None = None

    @property
    def stored_tags(self) -> tuple[str, ...]:
        """The tags as the service keeps them: stripped, first-seen order, no duplicates."""
        return tuple(dict.fromkeys(tag.strip() for tag in self.tags))


def said(content: st.SearchStrategy[str] = sentences, roles: tuple[str, ...] = ROLES) -> st.SearchStrategy[Said]:
    return st.builds(
        Said,
        role=st.sampled_from(roles),
        content=content,
        metadata=tame_metadata,
        pinned=st.booleans(),
        message_type=st.sampled_from(("text", "tool_call", "summary")),
    )


def planned(
    *,
    content: st.SearchStrategy[str] = sentences,
    roles: tuple[str, ...] = ROLES,
    titles: st.SearchStrategy[str | None] = st.none() | st.sampled_from(VOCABULARY),
    max_messages: int = 4,
    document_context: st.SearchStrategy[dict[str, Any] | None] = st.none(),
    embedding_provider: st.SearchStrategy[str | None] = st.none(),
) -> st.SearchStrategy[Planned]:
    return st.builds(
        Planned,
        title=titles,
        tags=tag_lists.map(tuple),
        messages=st.lists(said(content, roles), max_size=max_messages).map(tuple),
        document_context=document_context,
        embedding_provider=embedding_provider,
    )


# --- acting and observing -------------------------------------------------------------------

async def create(client: ChronicleClient, plan: Planned) -> tuple[UUID, list[UUID]]:
    """Start the planned conversation and say its messages; its id and its messages' ids."""
    optional: dict[str, Any] = {"title": plan.title, "document_context": plan.document_context, "embedding_provider": plan.embedding_provider}
    started = await client.conversations.start(
        tags=list(plan.tags), **{name: value for name, value in optional.items() if value is not None}
    )
    message_ids = []
    for message in plan.messages:
        added = await client.conversations.add_message(
            started.conversation_id,
            message.role,
            message.content,
            metadata=message.metadata,
            pinned=message.pinned,
            message_type=message.message_type,
        )
        message_ids.append(added.message_id)
    return started.conversation_id, message_ids


async def create_all(client: ChronicleClient, plans: list[Planned]) -> list[UUID]:
    return [(await create(client, plan))[0] for plan in plans]


async def fetch_all(client: ChronicleClient, conversation_ids: list[UUID]) -> list[ConversationView]:
    return [await client.conversations.get(conversation_id) for conversation_id in conversation_ids]


async def refusal(attempt: Awaitable[object]) -> ChronicleError:
    with pytest.raises(ChronicleError) as raised:
        await attempt
    return raised.value


def anonymised(error: ChronicleError, ident: UUID) -> tuple[str, str]:
    """An error with the id it names blanked, to compare refusals about different ids."""
    return error.code, error.message.replace(str(ident), "<id>")


def expected_stats(plans: list[Planned]) -> tuple[int, int, list[tuple[str, int]]]:
    tag_counts = Counter(tag for plan in plans for tag in plan.stored_tags)
    return (
        len(plans),
        sum(len(plan.messages) for plan in plans),
        sorted(tag_counts.items(), key=lambda item: (-item[1], item[0])),
    )


async def observed_stats(client: ChronicleClient) -> tuple[int, int, list[tuple[str, int]]]:
    stats = await client.conversations.stats(top_tags=100)
    return stats.total_conversations, stats.total_messages, [(t.tag, t.count) for t in stats.top_tags]


def expected_hits(conversations: list[ConversationView], word: str) -> set[tuple[UUID, UUID | None]]:
    """(conversation, message) pairs that mention the word; a title hit has no message."""
    hits: set[tuple[UUID, UUID | None]] = set()
    for conversation in conversations:
        if mentions(conversation.title, word):
            hits.add((conversation.id, None))
        hits.update((conversation.id, m.id) for m in conversation.messages if mentions(m.content, word))
    return hits


async def assert_search_finds_exactly(client: ChronicleClient, conversations: list[ConversationView]) -> None:
    """Every vocabulary word finds exactly what mentions it: nothing else, nothing twice, nothing missed.

    A word nobody wrote therefore has to find nothing.
    """
    titles = {conversation.id: conversation.title for conversation in conversations}
    for word in VOCABULARY:
        found = (await client.conversations.search(word, limit=100)).items
        pairs = [(hit.conversation_id, hit.message_id) for hit in found]
        assert set(pairs) == expected_hits(conversations, word), word
        assert len(pairs) == len(set(pairs)), word
        assert all(hit.title == titles[hit.conversation_id] for hit in found), word


async def listed_ids(client: ChronicleClient, **filters: Any) -> tuple[list[UUID], int]:
    page = await client.conversations.list(limit=100, **filters)
    return [summary.id for summary in page.items], page.total


def aimed_at(plan: Planned, victim_id: str) -> Planned:
    digest = hashlib.md5(victim_id.encode()).hexdigest()
    return replace(
        plan, messages=tuple(replace(m, content=m.content.replace(VICTIM_DIGEST, digest)) for m in plan.messages)
    )


def exact_json(value: Any) -> Any:
    """JSON with its numbers as the decimals on the wire: 1e16 sent may come back as 10**16."""
    if isinstance(value, dict):
        return {key: exact_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [exact_json(item) for item in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Decimal(repr(value))
    return value


# --- properties -----------------------------------------------------------------------------

@PROPERTIES
@given(theirs=st.lists(planned(content=hostile_sentences), min_size=1, max_size=3), mine=st.lists(planned(), max_size=2))
@example(theirs=[Planned(messages=(Said("user", f"zebra owner{VICTIM_DIGEST}"),))], mine=[])
async def test_a_user_never_sees_another_users_conversations(
    connect: ClientFactory, theirs: list[Planned], mine: list[Planned]
) -> None:
    victim_id = f"user-{uuid.uuid4().hex[:12]}"
    author, victim = await connect(), await connect(victim_id)
    their_ids = await create_all(author, [aimed_at(plan, victim_id) for plan in theirs])
    my_ids = await create_all(victim, mine)

    # The author's data exists, so the victim seeing none of it means something.
    assert sorted((await listed_ids(author))[0]) == sorted(their_ids)
    ids, total = await listed_ids(victim)
    assert (sorted(ids), total) == (sorted(my_ids), len(mine))
    await assert_search_finds_exactly(victim, await fetch_all(victim, my_ids))
    assert await observed_stats(victim) == expected_stats(mine)
    stranger = uuid.uuid4()
    for their_id in their_ids:
        for read in (victim.conversations.get, victim.conversations.export):
            refused = await refusal(read(their_id))
            assert refused.code == "not_found"
            assert anonymised(refused, their_id) == anonymised(await refusal(read(stranger)), stranger)


@PROPERTIES
@given(messages=st.lists(said(free_text), min_size=1, max_size=8))
async def test_messages_come_back_oldest_first_as_sent(connect: ClientFactory, messages: list[Said]) -> None:
    client = await connect()
    conversation_id, message_ids = await create(client, Planned(messages=tuple(messages)))

    stored = (await client.conversations.get(conversation_id)).messages
    assert [m.id for m in stored] == message_ids
    assert [Said(m.role, m.content, m.metadata, m.pinned, m.message_type) for m in stored] == messages
    created = [m.created_at for m in stored]
    assert created == sorted(created)


@PROPERTIES
@given(
    fates=st.lists(st.tuples(planned(), st.none() | tag_lists, st.booleans()), min_size=1, max_size=4).filter(
        lambda fates: any(doomed for *_, doomed in fates)
    )
)
async def test_delete_removes_the_conversation_from_every_read_model(
    connect: ClientFactory, fates: list[tuple[Planned, list[str] | None, bool]]
) -> None:
    client = await connect()
    kept: list[tuple[UUID, Planned]] = []
    deleted: list[UUID] = []
    for plan, retag, doomed in fates:
        conversation_id, _ = await create(client, plan)
        # Retagging first makes delete take back the current tags, not the original ones.
        if retag is not None:
            await client.conversations.update(conversation_id, tags=retag)
            plan = replace(plan, tags=tuple(retag))
        if doomed:
            await client.conversations.delete(conversation_id)
            deleted.append(conversation_id)
        else:
            kept.append((conversation_id, plan))

    kept_ids = [conversation_id for conversation_id, _ in kept]
    ids, total = await listed_ids(client)
    assert (sorted(ids), total) == (sorted(kept_ids), len(kept))
    for gone in deleted:
        assert (await refusal(client.conversations.get(gone))).code == "not_found"
        assert (await refusal(client.conversations.export(gone))).code == "not_found"
    await assert_search_finds_exactly(client, await fetch_all(client, kept_ids))
    assert await observed_stats(client) == expected_stats([plan for _, plan in kept])


@PROPERTIES
@given(
    first=st.one_of(free_text, rambling, sentences),
    before=st.lists(said(free_text, roles=("agent", "system")), max_size=2),
    after=st.lists(said(free_text), max_size=2),
    elsewhere=st.lists(said(free_text), max_size=2),
)
async def test_the_first_user_message_titles_an_untitled_conversation(
    connect: ClientFactory, first: str, before: list[Said], after: list[Said], elsewhere: list[Said]
) -> None:
    client = await connect()
    expected = derive_title(first)
    # The same first user message reached by different paths: only it may decide the title.
    leading_id, _ = await create(client, Planned(messages=tuple(before)))
    assert (await client.conversations.get(leading_id)).title == ""
    for message in (Said("user", first), *after):
        await client.conversations.add_message(leading_id, message.role, message.content)
    following_id, _ = await create(client, Planned(messages=(Said("user", first), *elsewhere)))

    summaries = {s.id: s.title for s in (await client.conversations.list(limit=100)).items}
    assert summaries[leading_id] == summaries[following_id] == expected
    assert (await client.conversations.get(following_id)).title == expected
    assert 0 < len(expected) <= DERIVED_TITLE_MAX


@PROPERTIES
@given(plans=st.lists(planned(), min_size=1, max_size=4))
async def test_every_search_hit_mentions_the_word(connect: ClientFactory, plans: list[Planned]) -> None:
    client = await connect()
    ids = await create_all(client, plans)
    await assert_search_finds_exactly(client, await fetch_all(client, ids))


operations = st.lists(
    st.one_of(
        st.tuples(st.just("say"), st.integers(0, 3), said()),
        st.tuples(st.just("retitle"), st.integers(0, 3), st.sampled_from(VOCABULARY)),
        st.tuples(st.just("retag"), st.integers(0, 3), tag_lists),
    ),
    max_size=8,
)


async def perform(client: ChronicleClient, conversation_ids: list[UUID], operation: tuple[str, int, Any]) -> None:
    action, index, argument = operation
    target = conversation_ids[index % len(conversation_ids)]
    if action == "say":
        await client.conversations.add_message(target, argument.role, argument.content, pinned=argument.pinned)
    elif action == "retitle":
        await client.conversations.update(target, title=argument)
    else:
        await client.conversations.update(target, tags=argument)


@PROPERTIES
@given(plans=st.lists(planned(), min_size=1, max_size=3), later=operations)
async def test_updated_at_is_never_before_created_at(
    connect: ClientFactory, plans: list[Planned], later: list[tuple[str, int, Any]]
) -> None:
    client = await connect()
    ids = await create_all(client, plans)
    for operation in later:
        await perform(client, ids, operation)

    summaries = (await client.conversations.list(limit=100)).items
    assert len(summaries) == len(plans)
    assert all(s.updated_at >= s.created_at for s in summaries)
    for conversation in await fetch_all(client, ids):
        assert conversation.updated_at >= conversation.created_at
        assert all(conversation.created_at <= m.created_at <= conversation.updated_at for m in conversation.messages)


@PROPERTIES
@given(
    plan=planned(
        content=free_text,
        titles=st.none() | free_text,
        max_messages=5,
        document_context=st.none() | tame_metadata,
        embedding_provider=st.none() | st.sampled_from(("llama", "gemini", "grok")),
    )
)
async def test_json_export_round_trips_to_what_get_returns(connect: ClientFactory, plan: Planned) -> None:
    client = await connect()
    conversation_id, _ = await create(client, plan)

    exported = orjson.loads((await client.conversations.export(conversation_id, format="json")).content)
    got = await client.conversations.get(conversation_id)
    assert ConversationView.model_validate(exported) == got
    # Nothing beyond what get describes leaks into an export (an owner, say).
    assert set(exported) == set(ConversationView.model_fields) - {"next_cursor"}  # (a page's, not the document's)
    assert all(set(message) == set(MessageView.model_fields) for message in exported["messages"])


@PROPERTIES
@given(plans=st.lists(planned(max_messages=1), min_size=1, max_size=6), wanted=tag_filters)
async def test_tag_filter_returns_exactly_the_conversations_with_all_the_tags(
    connect: ClientFactory, plans: list[Planned], wanted: list[str]
) -> None:
    client = await connect()
    ids = await create_all(client, plans)

    page = await client.conversations.list(tags=wanted, limit=100)
    carrying = {i for i, plan in zip(ids, plans, strict=True) if set(wanted) <= set(plan.stored_tags)}
    assert {s.id for s in page.items} == carrying
    assert page.total == len(page.items) == len(carrying)
    assert all(set(wanted) <= set(s.tags) for s in page.items)
    everything = {s.id: s.tags for s in (await client.conversations.list(limit=100)).items}
    assert everything == {i: list(plan.stored_tags) for i, plan in zip(ids, plans, strict=True)}


@PROPERTIES
@given(plans=st.lists(planned(content=free_text, max_messages=6), min_size=1, max_size=4))
async def test_message_count_is_the_number_of_messages_stored(connect: ClientFactory, plans: list[Planned]) -> None:
    client = await connect()
    ids = await create_all(client, plans)

    summaries = {s.id: s for s in (await client.conversations.list(limit=100)).items}
    for conversation, plan in zip(await fetch_all(client, ids), plans, strict=True):
        summary = summaries[conversation.id]
        assert summary.message_count == conversation.message_count == len(conversation.messages) == len(plan.messages)
        assert summary.first_message == (plan.messages[0].content[:FIRST_MESSAGE_PREVIEW] if plan.messages else None)
    assert (await client.conversations.stats()).total_messages == sum(len(plan.messages) for plan in plans)


def sort_key(summary: ConversationSummaryView, sort_by: str) -> tuple[Any, UUID]:
    # The service breaks ties by id, in the same direction as the sort.
    return getattr(summary, sort_by), summary.id


@settings(PROPERTIES, max_examples=25)
@given(
    # Titles are one lowercase word or none, and nobody says "user" things that would derive
    # one, so any database collation orders titles as Python does.
    plans=st.lists(planned(roles=("agent", "system"), max_messages=2), max_size=12),
    sort_by=st.sampled_from(SORT_KEYS),
    order=st.sampled_from(("asc", "desc")),
    limit=st.integers(1, 5) | st.integers(1, 100),
    offset=st.integers(0, 15),
)
async def test_paging_walks_the_whole_sorted_list_once(
    connect: ClientFactory, plans: list[Planned], sort_by: str, order: str, limit: int, offset: int
) -> None:
    client = await connect()
    ids = await create_all(client, plans)

    whole = await client.conversations.list(sort_by=sort_by, order=order, limit=100)
    assert (sorted(s.id for s in whole.items), whole.total) == (sorted(ids), len(ids))
    keys = [sort_key(s, sort_by) for s in whole.items]
    assert keys == sorted(keys, reverse=order == "desc")
    whole_ids = [s.id for s in whole.items]

    walked: list[UUID] = []
    # One page past the end too: an empty page must still report the total.
    for start in range(0, len(ids) + limit, limit):
        page = await client.conversations.list(sort_by=sort_by, order=order, limit=limit, offset=start)
        assert (page.total, page.limit, page.offset) == (len(ids), limit, start)
        walked += [s.id for s in page.items]
    assert walked == whole_ids

    window = await client.conversations.list(sort_by=sort_by, order=order, limit=limit, offset=offset)
    assert [s.id for s in window.items] == whole_ids[offset : offset + limit]
    assert window.total == len(ids)
    opposite = await client.conversations.list(sort_by=sort_by, order="asc" if order == "desc" else "desc", limit=100)
    assert [s.id for s in opposite.items] == whole_ids[::-1]


@PROPERTIES
@given(metadata=json_objects, document_context=json_objects)
@example(metadata={"score": 1e20}, document_context={})
async def test_json_fields_read_back_as_sent(
    connect: ClientFactory, metadata: dict[str, Any], document_context: dict[str, Any]
) -> None:
    client = await connect()
    started = await client.conversations.start(document_context=document_context)
    await client.conversations.add_message(started.conversation_id, "user", "hello", metadata=metadata)

    got = await client.conversations.get(started.conversation_id)
    assert exact_json(got.document_context) == exact_json(document_context)
    assert exact_json(got.messages[0].metadata) == exact_json(metadata)


@pytest.fixture(scope="module")
async def quarantine(
    servers: TestServers, authority: TokenAuthority, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ClientFactory]:
    """Clients of a Chronicle with its own database, for input that may stall its read models for good."""
    with servers.fresh_database() as url:
        # A stalled read model answers "unavailable" after this wait; keep failures quick.
        isolated = make_settings(url, servers.nats_url, tmp_path_factory.mktemp("quarantine"), query_wait_timeout=1.0)
        instance = await bootstrap(isolated)
        # Its read models must exist first: building them takes longer than that wait.
        assert instance.engine is not None and await asyncio.to_thread(instance.engine.wait_prepared, 120)
        clients: list[ChronicleClient] = []

        async def connect_quarantined() -> ChronicleClient:
            client = await ChronicleClient.connect(
                instance.nats_url, authority.issue(f"user-{uuid.uuid4().hex[:12]}"), prefix=isolated.subject_prefix
            )
            clients.append(client)
            return client

        try:
            yield connect_quarantined
        finally:
            for client in clients:
                await client.close()
            await instance.stop()


any_text = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=60).filter(str.strip)


# No shrinking: once a poisoned event stalls the read models every later example fails
# too, so a shrunk example would be small for the wrong reason.
@settings(PROPERTIES, max_examples=15, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(title=any_text, tag=any_text.filter(lambda text: len(text) <= MAX_TAG_LENGTH), content=any_text)
@example(title="plain", tag="plain", content="a\x00b")
async def test_text_the_contract_accepts_reads_back_verbatim(
    quarantine: ClientFactory, title: str, tag: str, content: str
) -> None:
    client = await quarantine()
    try:
        started = await client.conversations.start(title=title, tags=[tag])
        await client.conversations.add_message(started.conversation_id, "user", content)
    except ChronicleError as refused:
        # Refusing text is a fair answer; accepting it and then never showing it is not.
        assert refused.code == "invalid"
        return
    got = await client.conversations.get(started.conversation_id)
    assert (got.title, got.tags, [m.content for m in got.messages]) == (title, [tag.strip()], [content])
