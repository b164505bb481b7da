// One conversation: its messages in order (HITL exchanges marked), its metadata; rename, tag,
// delete, and export as a JSON or Markdown download.
import { useEffect, useState } from "react";
import { api, ApiError } from "../api";
import { HITL_TYPES, parseTags, when, type Conversation } from "./model";

export function ConversationView({ token, id, changed, deleted }: {
  token: string; id: string; changed: () => void; deleted: () => void;
}) {
  const [conversation, setConversation] = useState<Conversation | null>(null);
  const [title, setTitle] = useState("");
  const [tags, setTags] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);

  useEffect(() => {
    const abort = new AbortController();
    setConversation(null);
    api<{ conversation: Conversation }>(token, `/api/conversations/${id}?limit=200`, { signal: abort.signal })
      .then((body) => { setConversation(body.conversation); setTitle(body.conversation.title); setTags(body.conversation.tags.join(", ")); })
      .catch((failure) => { if (!abort.signal.aborted) setError(failure instanceof ApiError ? failure.message : String(failure)); });
    return () => abort.abort();
  }, [token, id]);

  async function act(what: () => Promise<void>) {
    setError(null);
    setNotice(null);
    try {
      await what();
    } catch (failure) {
      setError(failure instanceof ApiError ? failure.message : String(failure));
    }
  }

  const save = () => act(async () => {
    const body = await api<{ conversation: Conversation }>(token, `/api/conversations/${id}`, {
      method: "PUT", body: { title: title.trim(), tags: parseTags(tags) } });
    setConversation({ ...body.conversation });
    setNotice("Saved.");
    changed();
  });

  const remove = () => act(async () => {
    if (!window.confirm(`Delete “${conversation?.title || "this conversation"}”?`)) return;
    await api(token, `/api/conversations/${id}`, { method: "DELETE" });
    deleted();
  });

  const download = (format: "json" | "markdown") => act(async () => {
    const response = await fetch(`/api/conversations/${id}/export?format=${format}`, { headers: { Authorization: `Bearer ${token}` } });
    if (!response.ok) {
      const body = (await response.json().catch(() => ({}))) as { error?: { code?: string; message?: string } };
      throw new ApiError(body.error?.code ?? "internal", body.error?.message ?? `HTTP ${response.status}`, response.status);
    }
    const link = document.createElement("a");
    link.href = URL.createObjectURL(await response.blob());
    link.download = `conversation-${id}.${format === "json" ? "json" : "md"}`;
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
  });

  if (error && !conversation) return <p role="alert" className="error">{error}</p>;
  if (!conversation) return <p>Loading…</p>;
  return (
    <article className="conversation" aria-labelledby="conversation-title">
      <h1 id="conversation-title">{conversation.title || "Untitled"}</h1>
      <dl className="facts">
        <dt>Created</dt><dd><time dateTime={conversation.createdAt}>{when(conversation.createdAt)}</time></dd>
        <dt>Updated</dt><dd><time dateTime={conversation.updatedAt}>{when(conversation.updatedAt)}</time></dd>
        <dt>Messages</dt><dd>{conversation.messageCount}</dd>
        {conversation.sessionId && (<><dt>Session</dt><dd><code>{conversation.sessionId}</code></dd></>)}
        {conversation.embeddingProvider && (<><dt>Embeddings</dt><dd>{conversation.embeddingProvider}</dd></>)}
      </dl>
      <form className="edit" onSubmit={(e) => { e.preventDefault(); void save(); }}>
        <div>
          <label htmlFor="conversation-rename">Title</label>
          <input id="conversation-rename" value={title} onChange={(e) => setTitle(e.target.value)} />
        </div>
        <div>
          <label htmlFor="conversation-tags">Tags (comma-separated)</label>
          <input id="conversation-tags" value={tags} onChange={(e) => setTags(e.target.value)} />
        </div>
        <div className="actions">
          <button type="submit">Save</button>
          <button type="button" onClick={() => void download("json")}>Export JSON</button>
          <button type="button" onClick={() => void download("markdown")}>Export Markdown</button>
          <button type="button" className="danger" onClick={() => void remove()}>Delete</button>
        </div>
      </form>
      {error && <p role="alert" className="error">{error}</p>}
      {notice && <p role="status" className="done">{notice}</p>}
      <ol className="messages" aria-label="Messages">
        {conversation.messages.map((message) => (
          <li key={message.id} className={HITL_TYPES.has(message.messageType) ? "message hitl" : "message"}>
            <span className="role">{message.role}</span>
            {HITL_TYPES.has(message.messageType) && <span className="badge">{message.messageType === "hitl_prompt" ? "checkpoint" : "answer"}</span>}
            {message.pinned && <span className="badge pinned">pinned</span>}
            <time dateTime={message.createdAt}>{when(message.createdAt)}</time>
            <p className="content">{message.content}</p>
          </li>
        ))}
      </ol>
      {conversation.nextCursor && <p>Older messages are not shown (the first 200).</p>}
    </article>
  );
}
