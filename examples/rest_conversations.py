"""Seed 001's story over REST with plain HTTP (the standard library only, as any front end
or script in any language would): a user keeps conversations with an agent, finds them
again, continues one, and exports it.

Run it beside a running service:

    ./dev serve &
    CHRONICLE_TOKEN=$(./dev chronicle token alice) ./dev python examples/rest_conversations.py

CHRONICLE_API_URL is the REST API (default http://127.0.0.1:8470, the `http` of the ready line).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

API = os.environ.get("CHRONICLE_API_URL", "http://127.0.0.1:8470")


def call(method: str, path: str, body: dict[str, Any] | None = None, **query: object) -> Any:
    """One request with the bearer token; the reply's JSON (or text), or exit on an error envelope."""
    url = f"{API}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None)
    request.add_header("Authorization", f"Bearer {os.environ['CHRONICLE_TOKEN']}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            text = reply.read().decode()
            return json.loads(text) if reply.headers.get_content_type() == "application/json" else text
    except urllib.error.HTTPError as error:  # {"success": false, "error": {"code", "message", "details"}}
        sys.exit(f"{method} {path}: {error.code} {json.loads(error.read())['error']}")


def main() -> None:
    if not os.environ.get("CHRONICLE_TOKEN"):
        sys.exit("set CHRONICLE_TOKEN (CHRONICLE_TOKEN=$(./dev chronicle token alice))")

    # Two conversations with the agent, tagged.
    trip = call("POST", "/api/conversations", {"title": "Trip to Lisbon", "tags": ["travel"]})["conversationId"]
    for role, content in (("user", "Where should we eat in Alfama?"), ("agent", "Try the grilled sardines."),
                          ("user", "And for dessert?"), ("agent", "A pastel de nata, warm.")):
        call("POST", f"/api/conversations/{trip}/messages", {"role": role, "content": content})
    work = call("POST", "/api/conversations", {"title": "Quarterly report", "tags": ["work"]})["conversationId"]
    call("POST", f"/api/conversations/{work}/messages", {"role": "user", "content": "Summarise the sales figures"})

    # The history sidebar: most recently updated first, with message counts and first messages.
    listed = call("GET", "/api/conversations", limit=20, sortBy="updated_at", order="desc")
    print(f"{listed['total']} conversations:")
    for summary in listed["conversations"]:
        print(f"  {summary['title']:<20} {summary['messageCount']} messages  first: {summary['firstMessage']!r}")

    # Search finds the conversation by what was said in it.
    found = call("GET", "/api/conversations/search", q="sardines")
    for hit in found["results"]:
        print(f"search 'sardines': {hit['title']} ({hit['matchedMessage']})")

    # Continue it: load it, add to it, rename and retag it.
    conversation = call("GET", f"/api/conversations/{trip}")["conversation"]
    print(f"continuing {conversation['title']!r} after {len(conversation['messages'])} messages")
    call("POST", f"/api/conversations/{trip}/messages", {"role": "user", "content": "Book a table for two"})
    call("PUT", f"/api/conversations/{trip}", {"title": "Lisbon food", "tags": ["travel", "food"]})

    stats = call("GET", "/api/conversations/stats")["stats"]
    print(f"stats: {stats['totalConversations']} conversations, {stats['totalMessages']} messages, "
          f"{stats['averageMessagesPerConversation']} on average, top tags {[t['tag'] for t in stats['topTags']]}")

    print("export (markdown):")
    print(call("GET", f"/api/conversations/{trip}/export", format="markdown").strip())

    call("DELETE", f"/api/conversations/{work}")
    left = call("GET", "/api/conversations")["conversations"]
    print(f"after deleting the report: {[c['title'] for c in left]}")


if __name__ == "__main__":
    main()
