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
from services.runtime.dispatch import Read, Routes

ROUTES: Routes = {
    StartConversation: commands.start_conversation,
    AddMessage: commands.add_message,
    UpdateConversation: commands.update_conversation,
    DeleteConversation: commands.delete_conversation,
    ListConversations: Read(queries.list_conversations, reads=("history",)),
    GetConversation: Read(queries.get, reads=("history",)),
    SearchConversations: Read(queries.search_conversations, reads=("search",)),
    ConversationStatsQuery: Read(queries.conversation_stats, reads=("stats",)),
    ExportConversation: Read(queries.export_conversation, reads=("history",)),
}
