// A variation set side by side (each member, its temperature and status, the set's diversity
// and rankings) and a comparison of 2 to 10 artifacts (their shapes, and each pair's similarity).
import { useEffect, useState } from "react";
import { api, ApiError, query } from "../api";

interface Member { index: number; temperature: number; status: "stored" | "failed"; artifactId: string | null; error: string | null }
interface VariationSet { id: string; query: string; diversity: number; styleVariety: number; rankings: Record<string, number[]>; members: Member[] }
interface Compared { id: string; nodeCount: number; depth: number; sizeBytes: number; componentVariety: number }
interface Pair { a: string; b: string; structuralSimilarity: number; componentOverlap: number }

export const MAX_COMPARED = 10;

function message(failure: unknown): string {
  return failure instanceof ApiError ? failure.message : String(failure);
}

export function VariationSetView({ token, id, open }: { token: string; id: string; open: (artifactId: string) => void }) {
  const [set, setSet] = useState<VariationSet | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api<VariationSet>(token, `/api/variations/${id}`).then(setSet).catch((failure) => setError(message(failure)));
  }, [token, id]);
  if (error) return <p role="alert" className="error">{error}</p>;
  if (!set) return <p>Loading…</p>;
  return (
    <section aria-label="Variation set">
      <h2>Variation set</h2>
      <p>diversity {set.diversity.toFixed(3)} · style variety {set.styleVariety}</p>
      <div className="variations">
        {set.members.map((member) => (
          <div key={member.index} className="variation">
            <h3>#{member.index}</h3>
            <p>temperature {member.temperature} · {member.status}</p>
            {member.artifactId && <button type="button" onClick={() => open(member.artifactId as string)}>Open #{member.index}</button>}
            {member.error && <p className="error">{member.error}</p>}
          </div>
        ))}
      </div>
      {Object.keys(set.rankings).length > 0 && (
        <table>
          <thead><tr><th scope="col">ranking</th><th scope="col">members, best first</th></tr></thead>
          <tbody>{Object.entries(set.rankings).map(([name, order]) => <tr key={name}><td>{name}</td><td>{order.map((n) => `#${n}`).join(" › ")}</td></tr>)}</tbody>
        </table>
      )}
    </section>
  );
}

export function Comparison({ token, ids }: { token: string; ids: string[] }) {
  const [result, setResult] = useState<{ artifacts: Compared[]; pairs: Pair[] } | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api<{ artifacts: Compared[]; pairs: Pair[] }>(token, `/api/artifacts/compare${query({ artifactIds: ids.join(",") })}`)
      .then(setResult).catch((failure) => setError(message(failure)));
  }, [token, ids]);
  if (error) return <p role="alert" className="error">{error}</p>;
  if (!result) return <p>Loading…</p>;
  const short = (id: string) => id.slice(0, 8);
  return (
    <section aria-label="Comparison">
      <h2>Comparing {result.artifacts.length} artifacts</h2>
      <table>
        <thead><tr><th scope="col">artifact</th><th scope="col">nodes</th><th scope="col">depth</th><th scope="col">bytes</th><th scope="col">component variety</th></tr></thead>
        <tbody>{result.artifacts.map((a) => <tr key={a.id}><td>{short(a.id)}</td><td>{a.nodeCount}</td><td>{a.depth}</td><td>{a.sizeBytes}</td><td>{a.componentVariety}</td></tr>)}</tbody>
      </table>
      <table>
        <thead><tr><th scope="col">pair</th><th scope="col">structural similarity</th><th scope="col">component overlap</th></tr></thead>
        <tbody>{result.pairs.map((p) => <tr key={`${p.a}-${p.b}`}><td>{short(p.a)} · {short(p.b)}</td><td>{p.structuralSimilarity.toFixed(3)}</td><td>{p.componentOverlap.toFixed(3)}</td></tr>)}</tbody>
      </table>
    </section>
  );
}
