// The optimizations section: the caller's optimizations, and one's curve, rounds, Pareto front and candidate lineage.
import { useEffect, useState } from "react";
import { api, ApiError, query } from "../api";
import { BestSoFarChart, ParetoChart, RoundScores, type ObjectivePoint } from "./Charts";
import { bestSoFarCurve, objectivesOf, type Direction, type Optimization, type Round } from "./model";

const MAX_PAGES = 50;

interface Ancestor { candidateId: string; depth: number; parents: string[]; origin: string | null; bestScore: number | null }

function message(failure: unknown): string {
  return failure instanceof ApiError ? failure.message : String(failure);
}

export function Optimizations({ token, path, go }: { token: string; path: string; go: (to: string) => void }) {
  const selected = path.split("/")[2] || null;
  const [items, setItems] = useState<Optimization[] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    api<{ items: Optimization[] }>(token, "/api/optimizations?limit=100")
      .then((body) => setItems(body.items)).catch((failure) => setError(message(failure)));
  }, [token]);

  return (
    <div className="optimizations">
      <aside aria-label="Optimizations" className="sidebar">
        <h1>Optimizations</h1>
        {error && <p role="alert" className="error">{error}</p>}
        {items === null ? <p>Loading…</p> : items.length === 0 ? <p>No optimizations.</p> : (
          <ul className="items" aria-label="Your optimizations">
            {items.map((item) => (
              <li key={item.optimizationId}>
                <button type="button" aria-current={selected === item.optimizationId ? "true" : undefined}
                  onClick={() => go(`/optimizations/${item.optimizationId}`)}>
                  <span className="title">{item.name}</span>
                  <span className="meta">{item.optimizer} · {item.direction} · {item.rounds} rounds · {item.trials} trials
                    {item.bestScore !== null && <> · best {item.bestScore}</>}{item.stopped && <> · stopped</>}</span>
                </button>
              </li>
            ))}
          </ul>
        )}
      </aside>
      <section className="pane" aria-label="Optimization">
        {selected ? <OptimizationView key={selected} token={token} id={selected} /> : <p>Choose an optimization.</p>}
      </section>
    </div>
  );
}

function OptimizationView({ token, id }: { token: string; id: string }) {
  const [optimization, setOptimization] = useState<Optimization | null>(null);
  const [rounds, setRounds] = useState<Round[] | null>(null);
  const [axes, setAxes] = useState<[string, string] | null>(null);
  const [directions, setDirections] = useState<Record<string, Direction>>({});
  const [front, setFront] = useState<ObjectivePoint[]>([]);
  const [lineage, setLineage] = useState<{ candidateId: string; ancestors: Ancestor[] } | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    (async () => {
      setOptimization(await api<Optimization>(token, `/api/optimizations/${id}`));
      const all: Round[] = [];
      let after: number | null = null;
      for (let page = 0; page < MAX_PAGES; page++) {
        const body: { rounds: Round[]; nextAfterRound: number | null; nextAfterTrial: number | null } =
          await api(token, `/api/optimizations/${id}/history${query({ afterRound: after ?? undefined })}`);
        for (const round of body.rounds) {
          const known = all.find((r) => r.roundIndex === round.roundIndex);
          if (known) known.trials.push(...round.trials); else all.push(round);
        }
        if (body.nextAfterRound === null || body.nextAfterTrial !== null) break; // (a round cut mid-way: its first part is enough here)
        after = body.nextAfterRound;
      }
      setRounds(all);
      const names = objectivesOf(all);
      setAxes([names[0], names[1] ?? names[0]]);
    })().catch((failure) => setError(message(failure)));
  }, [token, id]);

  useEffect(() => {
    if (!axes) return;
    const asked = [...new Set(axes)];
    const objectives = asked.join(",");
    const chosen = Object.fromEntries(asked.filter((name) => directions[name]).map((name) => [name, directions[name]]));
    api<{ front: { trialIndex: number; candidateId: string | null; objectives: Record<string, number> }[] }>(
      token, `/api/optimizations/${id}/pareto${query({ scope: "all", objectives,
        directions: Object.keys(chosen).length ? JSON.stringify(chosen) : undefined })}`)
      .then((body) => setFront(body.front.map((point) => ({ x: point.objectives[axes[0]], y: point.objectives[axes[1]],
        candidateId: point.candidateId, trialIndex: point.trialIndex })).sort((a, b) => a.x - b.x)))
      .catch((failure) => setError(message(failure)));
  }, [token, id, axes, directions]);

  async function showLineage(candidateId: string) {
    try {
      const body = await api<{ lineage: Ancestor[] }>(token, `/api/optimizations/${id}/candidates/${encodeURIComponent(candidateId)}/lineage`);
      setLineage({ candidateId, ancestors: body.lineage });
    } catch (failure) {
      setError(message(failure));
    }
  }

  if (error) return <p role="alert" className="error">{error}</p>;
  if (!optimization || !rounds || !axes) return <p>Loading…</p>;
  const names = objectivesOf(rounds);
  const value = (trial: Round["trials"][number], name: string) => (name === "score" ? trial.score : trial.metrics[name]) as number | null;
  const all = rounds.flatMap((round) => round.trials).filter((t) => !t.invalid && value(t, axes[0]) !== null && value(t, axes[1]) !== null)
    .map((t) => ({ x: value(t, axes[0]) as number, y: value(t, axes[1]) as number, candidateId: t.candidateId, trialIndex: t.trialIndex }));
  const candidates = [...new Set(front.map((point) => point.candidateId).filter((c): c is string => c !== null))];
  return (
    <article className="optimization" aria-labelledby="optimization-title">
      <h1 id="optimization-title">{optimization.name}</h1>
      <p>{optimization.optimizer} · {optimization.direction} · {optimization.rounds} rounds · {optimization.trials} trials
        {optimization.bestScore !== null && <> · best {optimization.bestScore}</>}
        {optimization.stopReason && <> · stopped: {optimization.stopReason}</>}</p>
      <h2>Best so far</h2>
      <BestSoFarChart curve={bestSoFarCurve(rounds, optimization.direction)} direction={optimization.direction} />
      <h2>Scores per round</h2>
      <RoundScores rounds={rounds} />
      <h2>Pareto front</h2>
      <div className="filters">
        {([0, 1] as const).map((axis) => (
          <div key={axis}>
            <label htmlFor={`axis-${axis}`}>{axis === 0 ? "Horizontal objective" : "Vertical objective"}</label>
            <select id={`axis-${axis}`} value={axes[axis]}
              onChange={(e) => setAxes(axis === 0 ? [e.target.value, axes[1]] : [axes[0], e.target.value])}>
              {names.map((name) => <option key={name} value={name}>{name}</option>)}
            </select>
            <label htmlFor={`direction-${axis}`}>{`Direction of ${axes[axis]}`}</label>
            <select id={`direction-${axis}`} value={directions[axes[axis]] ?? optimization.direction}
              onChange={(e) => setDirections({ ...directions, [axes[axis]]: e.target.value as Direction })}>
              <option value="maximize">maximize</option>
              <option value="minimize">minimize</option>
            </select>
          </div>
        ))}
      </div>
      <ParetoChart all={all} front={front} names={axes} pick={(point) => point.candidateId && void showLineage(point.candidateId)} />
      {candidates.length > 0 && (
        <p className="candidates">Lineage of a front candidate:{" "}
          {candidates.map((candidate) => <button key={candidate} type="button" onClick={() => void showLineage(candidate)}>{candidate}</button>)}
        </p>
      )}
      {lineage && (
        <section aria-label="Candidate lineage">
          <h2>Lineage of {lineage.candidateId}</h2>
          <table>
            <thead><tr><th scope="col">depth</th><th scope="col">candidate</th><th scope="col">parents</th><th scope="col">origin</th><th scope="col">best score</th></tr></thead>
            <tbody>
              {lineage.ancestors.map((ancestor) => (
                <tr key={ancestor.candidateId}>
                  <td>{ancestor.depth}</td><td>{ancestor.candidateId}</td><td>{ancestor.parents.join(", ")}</td>
                  <td>{ancestor.origin ?? ""}</td><td>{ancestor.bestScore ?? ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
    </article>
  );
}
