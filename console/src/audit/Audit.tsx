// The audit section: a conversation's or session's timeline (its events in log order, each
// with its chain hash), and an aggregate's state at a chosen version.
import { useState } from "react";
import { api, ApiError, query } from "../api";

interface AuditEvent {
  aggregateId: string;
  aggregateType: string;
  version: number;
  position: number;
  type: string;
  timestamp: string;
  erased: boolean;
  hash: string | null;
}

function message(failure: unknown): string {
  return failure instanceof ApiError ? failure.message : String(failure);
}

export function Audit({ token }: { token: string }) {
  const [scope, setScope] = useState(new URLSearchParams(window.location.search).get("scope") ?? "");
  const [events, setEvents] = useState<AuditEvent[] | null>(null);
  const [state, setState] = useState<{ event: AuditEvent; state: unknown } | null>(null);
  const [error, setError] = useState<string | null>(null);

  async function load(event: React.FormEvent) {
    event.preventDefault();
    setError(null);
    setState(null);
    try {
      const body = await api<{ events: AuditEvent[] }>(token, `/api/audit/timeline/${encodeURIComponent(scope.trim())}${query({ limit: 500 })}`);
      setEvents(body.events);
    } catch (failure) {
      setEvents(null);
      setError(message(failure));
    }
  }

  async function stateAt(event: AuditEvent) {
    setError(null);
    try {
      const body = await api<{ state: unknown }>(token,
        `/api/audit/streams/${event.aggregateId}${query({ atVersion: event.version, afterVersion: event.version, limit: 1 })}`);
      setState({ event, state: body.state });
    } catch (failure) {
      setError(message(failure));
    }
  }

  const unchained = events?.filter((event) => !event.hash).length ?? 0;
  return (
    <div className="audit">
      <h1>Audit</h1>
      <form onSubmit={load} className="request">
        <label htmlFor="audit-scope">Conversation or session id</label>
        <div className="row">
          <input id="audit-scope" value={scope} onChange={(e) => setScope(e.target.value)} />
          <button type="submit" disabled={!scope.trim()}>Show timeline</button>
        </div>
      </form>
      {error && <p role="alert" className="error">{error}</p>}
      {events && (
        <section aria-label="Timeline">
          <p role="status">{events.length} events; {unchained === 0 ? "every event carries its chain hash"
            : `${unchained} without a chain hash`} (the whole chain is recomputed by <code>chronicle audit verify</code>).</p>
          <table>
            <thead><tr><th scope="col">position</th><th scope="col">time</th><th scope="col">aggregate</th><th scope="col">version</th>
              <th scope="col">event</th><th scope="col">hash</th><th scope="col">state</th></tr></thead>
            <tbody>
              {events.map((event) => (
                <tr key={event.position}>
                  <td>{event.position}</td>
                  <td><time dateTime={event.timestamp}>{new Date(event.timestamp).toLocaleString()}</time></td>
                  <td>{event.aggregateType} {event.aggregateId.slice(0, 8)}</td>
                  <td>{event.version}</td>
                  <td>{event.type}{event.erased && " (erased)"}</td>
                  <td><code>{event.hash ? event.hash.slice(0, 12) : "—"}</code></td>
                  <td><button type="button" onClick={() => void stateAt(event)}
                    aria-label={`State of ${event.aggregateType} at version ${event.version}`}>at v{event.version}</button></td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
      {state && (
        <section aria-label="State at version">
          <h2>{state.event.aggregateType} {state.event.aggregateId.slice(0, 8)} at version {state.event.version}</h2>
          <pre className="draft">{JSON.stringify(state.state, null, 2)}</pre>
        </section>
      )}
    </div>
  );
}
