// The audit section: a conversation's or session's timeline (its events in log order, each
// with its chain hash), an aggregate's state at a chosen version, and each aggregate's hash
// chain recomputed by the service (audit.verify).
import { useState } from "react";
import { api, ApiError, query } from "../api";
import { chainSummary, withSpan, type ChainSpan, type ChainStatus } from "./chain";

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

interface Member {
  aggregateId: string;
  aggregateType: string;
}

// The timeline's aggregates, in the order they first appear.
function membersOf(events: AuditEvent[]): Member[] {
  const seen = new Map<string, Member>();
  for (const { aggregateId, aggregateType } of events) if (!seen.has(aggregateId)) seen.set(aggregateId, { aggregateId, aggregateType });
  return [...seen.values()];
}

export function Audit({ token }: { token: string }) {
  const [scope, setScope] = useState(new URLSearchParams(window.location.search).get("scope") ?? "");
  const [events, setEvents] = useState<AuditEvent[] | null>(null);
  const [state, setState] = useState<{ event: AuditEvent; state: unknown } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [chains, setChains] = useState<Record<string, ChainStatus>>({});
  const [checking, setChecking] = useState<string | null>(null);

  async function load(event: React.FormEvent) {
    event.preventDefault();
    setError(null);
    setState(null);
    setChains({});
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

  // One span per click: a stream longer than a span goes on from where the last one stopped
  // (`from`); a stream checked to its end is checked again from its start.
  async function verify(aggregateId: string, from: ChainStatus | undefined) {
    setError(null);
    setChecking(aggregateId);
    try {
      const after = from?.nextAfterVersion ?? undefined;
      const span = await api<ChainSpan>(token,
        `/api/audit/streams/${encodeURIComponent(aggregateId)}/verify${query({ afterVersion: after })}`);
      setChains((known) => ({ ...known, [aggregateId]: withSpan(from, span) }));
    } catch (failure) {
      setError(message(failure));
    } finally {
      setChecking(null);
    }
  }

  const unchained = events?.filter((event) => !event.hash).length ?? 0;
  const members = events ? membersOf(events) : [];
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
            : `${unchained} without a chain hash`}.</p>
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
                    aria-label={`State of ${event.aggregateType} at version ${event.version}`}>at version {event.version}</button></td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
      {events && members.length > 0 && (
        <section aria-labelledby="chains-heading">
          <h2 id="chains-heading">Chain verification</h2>
          <p>The service recomputes each aggregate's hash chain from its stored events, up to 1,000 events at a
            time. A changed or removed event is a break; removing a stream's last events leaves none (the
            published digests catch that).</p>
          <table>
            <thead><tr><th scope="col">aggregate</th><th scope="col">chain</th><th scope="col">check</th></tr></thead>
            <tbody>
              {members.map(({ aggregateId, aggregateType }) => {
                const status = chains[aggregateId];
                const further = status !== undefined && status.nextAfterVersion !== null;
                const action = !status ? "Verify" : further ? "Check further" : "Verify again";
                const name = `${aggregateType} ${aggregateId.slice(0, 8)}`;
                return (
                  <tr key={aggregateId}>
                    <th scope="row">{name}</th>
                    <td className={status?.breaks.length ? "error" : status ? "done" : undefined}>
                      {status ? chainSummary(status) : "not checked"}</td>
                    <td>
                      <button type="button" onClick={() => void verify(aggregateId, further ? status : undefined)}
                        disabled={checking !== null} aria-label={`${action} the chain of ${name}`}>
                        {action.toLowerCase()}</button>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
          <p role="status" className="live">{checking ? "checking…" : ""}</p>
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
