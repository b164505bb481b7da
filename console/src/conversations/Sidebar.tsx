// Seed 001's sidebar: the caller's conversations with title, first message, count and dates,
// filtered by tags and sorted; or, while a search runs, its results with the words highlighted.
import { useEffect, useState } from "react";
import { api, query } from "../api";
import { parseTags, when, type SearchResult, type Summary } from "./model";
import { Snippet } from "./Snippet";

const SORTS = [
  { value: "updated_at:desc", label: "Recently updated" },
  { value: "created_at:desc", label: "Newest" },
  { value: "created_at:asc", label: "Oldest" },
  { value: "title:asc", label: "Title A–Z" },
];

export function Sidebar({ token, selected, open, version, onError }: {
  token: string; selected: string | null; open: (id: string) => void; version: number; onError: (error: unknown) => void;
}) {
  const [conversations, setConversations] = useState<Summary[] | null>(null);
  const [tags, setTags] = useState("");
  const [sort, setSort] = useState(SORTS[0].value);
  const [search, setSearch] = useState("");
  const [results, setResults] = useState<SearchResult[] | null>(null);

  useEffect(() => {
    const abort = new AbortController();
    const [sortBy, order] = sort.split(":");
    api<{ conversations: Summary[] }>(token, `/api/conversations${query({ limit: 100, sortBy, order, tags: parseTags(tags).join(",") })}`,
      { signal: abort.signal })
      .then((body) => setConversations(body.conversations))
      .catch((error) => { if (!abort.signal.aborted) onError(error); });
    return () => abort.abort();
  }, [token, tags, sort, version, onError]);

  async function runSearch(event: React.FormEvent) {
    event.preventDefault();
    const words = search.trim();
    if (!words) { setResults(null); return; }
    try {
      const body = await api<{ results: SearchResult[] }>(token, `/api/conversations/search${query({ q: words, limit: 20 })}`);
      setResults(body.results);
    } catch (error) {
      onError(error);
    }
  }

  return (
    <aside className="sidebar" aria-label="Conversations">
      <form role="search" onSubmit={runSearch}>
        <label htmlFor="search">Search messages and titles</label>
        <div className="row">
          <input id="search" type="search" value={search} onChange={(e) => setSearch(e.target.value)} />
          <button type="submit">Search</button>
        </div>
      </form>
      {results !== null ? (
        <section aria-label="Search results">
          <p>{results.length} {results.length === 1 ? "conversation" : "conversations"} found.{" "}
            <button type="button" className="link" onClick={() => { setResults(null); setSearch(""); }}>Clear search</button></p>
          <ul className="items">
            {results.map((result) => (
              <li key={result.conversationId}>
                <button type="button" aria-current={selected === result.conversationId ? "true" : undefined}
                  onClick={() => open(result.conversationId)}>
                  <span className="title">{result.title}</span>
                  <Snippet snippet={result.snippet} />
                </button>
              </li>
            ))}
          </ul>
        </section>
      ) : (
        <>
          <div className="filters">
            <div>
              <label htmlFor="tags">Tags</label>
              <input id="tags" value={tags} onChange={(e) => setTags(e.target.value)} placeholder="work, ideas" />
            </div>
            <div>
              <label htmlFor="sort">Sort</label>
              <select id="sort" value={sort} onChange={(e) => setSort(e.target.value)}>
                {SORTS.map((option) => <option key={option.value} value={option.value}>{option.label}</option>)}
              </select>
            </div>
          </div>
          {conversations === null ? <p>Loading…</p> : conversations.length === 0 ? <p>No conversations.</p> : (
            <ul className="items" aria-label="Your conversations">
              {conversations.map((conversation) => (
                <li key={conversation.id}>
                  <button type="button" aria-current={selected === conversation.id ? "true" : undefined}
                    onClick={() => open(conversation.id)}>
                    <span className="title">{conversation.title || "Untitled"}</span>
                    {conversation.firstMessage && <span className="first">{conversation.firstMessage}</span>}
                    <span className="meta">
                      {conversation.messageCount} messages · updated <time dateTime={conversation.updatedAt}>{when(conversation.updatedAt)}</time>
                      {" "}· created <time dateTime={conversation.createdAt}>{when(conversation.createdAt)}</time>
                    </span>
                    {conversation.tags.length > 0 && <span className="tags">{conversation.tags.map((tag) => <span key={tag} className="tag">{tag}</span>)}</span>}
                  </button>
                </li>
              ))}
            </ul>
          )}
        </>
      )}
    </aside>
  );
}
