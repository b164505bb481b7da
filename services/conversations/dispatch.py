"""Conversations' dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.conversations import (
    AddMessage,
    ConversationStatsQuery,
    DeleteConversation,
    ExportConversation,
    GetConversation,
    ListConversations,
    SearchConversations,
    StartConversation,
    UpdateConversation,
)

from services.conversations import commands, queries
from services.runtime.dispatch import Decide, Read

ROUTES = (
    Decide(StartConversation, commands.start_conversation),
    Decide(AddMessage, commands.add_message),
    Decide(UpdateConversation, commands.update_conversation),
    Decide(DeleteConversation, commands.delete_conversation),
    Read(ListConversations, queries.list_conversations, reads=("history",)),
    Read(GetConversation, queries.get, reads=("history",)),
    Read(SearchConversations, queries.search_conversations, reads=("search",)),
    Read(ConversationStatsQuery, queries.conversation_stats, reads=("stats",)),
    Read(ExportConversation, queries.export_conversation, reads=("history",)),
)
