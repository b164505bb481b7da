// The HITL inbox: the caller's open checkpoints, oldest first, kept live by GET /api/hitl/events.
import { useCallback, useEffect, useState } from "react";
import { api, ApiError } from "../api";
import { followAgain, type ServerEvent } from "../sse";
import { Checkpoint } from "./Checkpoint";
import { oldestFirst, type Run } from "./model";

export function Inbox({ token, onUnauthorized }: { token: string; onUnauthorized: () => void }) {
  const [runs, setRuns] = useState<Map<string, Run>>(new Map());
  const [selected, setSelected] = useState<string | null>(null);
  const [live, setLive] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);

  const failed = useCallback((failure: unknown) => {
    if (failure instanceof ApiError && failure.code === "unauthorized") onUnauthorized();
    else if (!(failure instanceof DOMException && failure.name === "AbortError")) setError(String(failure instanceof Error ? failure.message : failure));
  }, [onUnauthorized]);

  useEffect(() => {
    const abort = new AbortController();
    // What the signals said since this effect began: a list read a moment behind them
    // (the read model catching up) neither drops a new pause nor brings back an answered one.
    const signalled = new Map<string, Run>();
    const ended = new Set<string>();
    let generation = 0;
    const load = async () => {
      const mine = ++generation;
      const body = await api<{ items: Run[] }>(token, "/api/hitl/runs?limit=100", { signal: abort.signal });
      if (mine !== generation) return; // (a later read is on its way)
      const open = [...body.items.filter((run) => run.status === "paused"), ...signalled.values()];
      setRuns(new Map(open.filter((run) => !ended.has(run.runId)).map((run) => [run.runId, run])));
      setError(null);
    };
    const onEvent = (event: ServerEvent) => {
      const signal = JSON.parse(event.data) as { runId?: string; position?: number };
      if (event.event === "ready") {
        setLive(true);
        load().catch(failed);
      } else if (event.event === "resync") {
        load().catch(failed);
      } else if (event.event === "paused" && signal.runId) {
        const runId = signal.runId;
        ended.delete(runId); // (a run pauses again at its next checkpoint)
        api<Run>(token, `/api/hitl/runs/${encodeURIComponent(runId)}?minPosition=${signal.position ?? ""}`, { signal: abort.signal })
          .then((run) => {
            if (run.status !== "paused" || ended.has(runId)) return;
            signalled.set(runId, run);
            setRuns((now) => new Map(now).set(runId, run));
          })
          .catch(failed);
      } else if ((event.event === "resumed" || event.event === "expired") && signal.runId) {
        const runId = signal.runId;
        ended.add(runId);
        setRuns((now) => { const next = new Map(now); next.delete(runId); return next; });
      }
    };
    load().catch(failed); // (again once the stream listens: a pause in between is in that list)
    void followAgain(token, "/api/hitl/events", onEvent, abort.signal, (failure) => {
      if (failure instanceof Error && failure.message.includes("HTTP 401")) { onUnauthorized(); return false; }
      setLive(false);
      return true;
    });
    return () => abort.abort();
  }, [token, failed, onUnauthorized]);

  const open = oldestFirst(runs.values());
  const current = open.find((run) => run.runId === selected) ?? open[0] ?? null;
  return (
    <div className="inbox">
      <section aria-labelledby="inbox-title" className="list">
        <h1 id="inbox-title">Waiting on you <span className="count">({open.length})</span></h1>
        <p className="live" role="status">{live ? "Live" : "Connecting…"}</p>
        {error && <p role="alert" className="error">{error}</p>}
        {notice && <p role="status" className="done">{notice}</p>}
        {open.length === 0 ? <p>No open checkpoints.</p> : (
          <ul aria-label="Open checkpoints">
            {open.map((run) => (
              <li key={run.runId}>
                <button type="button" aria-pressed={current?.runId === run.runId} onClick={() => setSelected(run.runId)}>
                  <span className="type">{run.checkpointType}</span> <span className="step">{run.step}</span>
                  <span className="prompt">{run.prompt}</span>
                </button>
              </li>
            ))}
          </ul>
        )}
      </section>
      {current && <Checkpoint key={current.runId} token={token} run={current}
        onAnswered={(runId, outcome) => {
          setNotice(outcome);
          setRuns((now) => { const next = new Map(now); next.delete(runId); return next; });
        }} />}
    </div>
  );
}
