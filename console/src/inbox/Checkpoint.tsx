// One checkpoint: its step, type, prompt, data, the conversation so far; approve or reject with feedback.
import { useEffect, useState } from "react";
import { api, ApiError } from "../api";
import { DataForm } from "./DataForm";
import { changed, proposedValues, type Run, type Scalar } from "./model";

interface Message {
  id: string;
  role: string;
  content: string;
  messageType: string;
  createdAt: string;
}

const HITL_TYPES = new Set(["hitl_prompt", "hitl_feedback"]);

export function Checkpoint({ token, run, onAnswered }: { token: string; run: Run; onAnswered: (runId: string, outcome: string) => void }) {
  const proposed = proposedValues(run.data);
  const [values, setValues] = useState(proposed);
  const [feedback, setFeedback] = useState("");
  const [history, setHistory] = useState<Message[] | null>(null);
  const [sending, setSending] = useState(false);
  const [outcome, setOutcome] = useState<{ kind: "error"; text: string } | null>(null);

  useEffect(() => {
    const abort = new AbortController();
    api<{ conversation: { messages: Message[] } }>(token, `/api/conversations/${run.conversationId}?limit=100`, { signal: abort.signal })
      .then((body) => setHistory(body.conversation.messages))
      .catch(() => setHistory([]));
    return () => abort.abort();
  }, [token, run.conversationId]);

  async function answer(approved: boolean) {
    setSending(true);
    setOutcome(null);
    try {
      await api(token, `/api/hitl/runs/${encodeURIComponent(run.runId)}/resume`, {
        method: "POST",
        body: { approved, edits: changed(proposed, values as Record<string, Scalar>), feedback: feedback.trim() || null },
      });
      onAnswered(run.runId, approved ? `Approved “${run.step}”: the run continues.` : `Rejected “${run.step}”: the run was told.`);
    } catch (error) {
      setOutcome({ kind: "error", text: error instanceof ApiError ? error.message : String(error) });
    } finally {
      setSending(false);
    }
  }

  return (
    <article className="checkpoint" aria-labelledby={`checkpoint-${run.runId}`}>
      <h2 id={`checkpoint-${run.runId}`}>{run.prompt}</h2>
      <dl className="facts">
        <dt>Step</dt><dd>{run.step}</dd>
        <dt>Type</dt><dd>{run.checkpointType}</dd>
        <dt>Paused</dt><dd><time dateTime={run.pausedAt}>{new Date(run.pausedAt).toLocaleString()}</time></dd>
        {run.expiresAt && (<><dt>Expires</dt><dd><time dateTime={run.expiresAt}>{new Date(run.expiresAt).toLocaleString()}</time></dd></>)}
        <dt>Run</dt><dd><code>{run.runId}</code></dd>
      </dl>
      <details>
        <summary>Data</summary>
        <pre>{JSON.stringify(run.data, null, 2)}</pre>
      </details>
      <section aria-label="Conversation history" className="history">
        <h3>Conversation</h3>
        {history === null ? <p>Loading…</p> : history.length === 0 ? <p>No messages.</p> : (
          <ol>
            {history.map((message) => (
              <li key={message.id} className={HITL_TYPES.has(message.messageType) ? "message hitl" : "message"}>
                <span className="role">{message.role}</span>
                {HITL_TYPES.has(message.messageType) && <span className="badge">{message.messageType === "hitl_prompt" ? "checkpoint" : "answer"}</span>}
                <span className="content">{message.content}</span>
              </li>
            ))}
          </ol>
        )}
      </section>
      <form className="answer" onSubmit={(e) => { e.preventDefault(); void answer(true); }}>
        <DataForm values={values} onChange={setValues} />
        <label htmlFor={`feedback-${run.runId}`}>Feedback</label>
        <textarea id={`feedback-${run.runId}`} value={feedback} onChange={(e) => setFeedback(e.target.value)} rows={3} />
        <div className="actions">
          <button type="submit" disabled={sending}>Approve</button>
          <button type="button" disabled={sending} onClick={() => void answer(false)}>Reject</button>
        </div>
      </form>
      {outcome && <p role="alert" className="error">{outcome.text}</p>}
    </article>
  );
}
