// The artifacts section: a session's artifacts, and one's draft, previews, lineage tree
// (ancestors and descendants, each node opens that artifact) and RAG influence.
import { Background, Controls, ReactFlow } from "@xyflow/react";
import "@xyflow/react/dist/style.css";
import { useEffect, useState } from "react";
import { api, ApiError, query } from "../api";
import { lineageGraph, type Relative } from "./lineage";
import { Comparison, MAX_COMPARED, VariationSetView } from "./Variations";

interface Summary { id: string; sessionId: string; parentId: string | null; generation: number; origin: string; query: string;
  tags: string[]; nodeCount: number; createdAt: string; variationSetId: string | null }
interface Preview { style: string; format: string; size: number; data: string | null }
interface Artifact extends Summary { draft: string; previews: Preview[]; model: string | null; componentTypes: Record<string, number> }
interface Example { id: string; score: number; text: string | null }

function message(failure: unknown): string {
  return failure instanceof ApiError ? failure.message : String(failure);
}

export function Artifacts({ token, path, go }: { token: string; path: string; go: (to: string) => void }) {
  const selected = path.split("/")[2] || null;
  const [session, setSession] = useState(new URLSearchParams(window.location.search).get("session") ?? "");
  const [items, setItems] = useState<Summary[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [picked, setPicked] = useState<string[]>([]);
  const [compared, setCompared] = useState<string[] | null>(null);

  useEffect(() => {
    const abort = new AbortController();
    api<{ items: Summary[] }>(token, `/api/artifacts${query({ limit: 100, sessionId: session.trim() || undefined })}`, { signal: abort.signal })
      .then((body) => { setItems(body.items); setError(null); })
      .catch((failure) => { if (!abort.signal.aborted) setError(message(failure)); });
    return () => abort.abort();
  }, [token, session]);

  return (
    <div className="optimizations">
      <aside aria-label="Artifacts" className="sidebar">
        <h1>Artifacts</h1>
        <label htmlFor="artifact-session">Session id</label>
        <input id="artifact-session" value={session} onChange={(e) => setSession(e.target.value)} placeholder="all sessions" />
        {error && <p role="alert" className="error">{error}</p>}
        <p><button type="button" disabled={picked.length < 2} onClick={() => setCompared([...picked])}>
          Compare {picked.length} (2 to {MAX_COMPARED})</button></p>
        {items === null ? <p>Loading…</p> : items.length === 0 ? <p>No artifacts.</p> : (
          <ul className="items" aria-label="Your artifacts">
            {items.map((item) => (
              <li key={item.id} className="pickable">
                <input type="checkbox" id={`compare-${item.id}`} checked={picked.includes(item.id)}
                  disabled={!picked.includes(item.id) && picked.length >= MAX_COMPARED}
                  onChange={(e) => setPicked(e.target.checked ? [...picked, item.id] : picked.filter((id) => id !== item.id))} />
                <label htmlFor={`compare-${item.id}`} className="visually-hidden">{`Compare ${item.query || item.id}`}</label>
                <button type="button" aria-current={selected === item.id ? "true" : undefined}
                  onClick={() => { setCompared(null); go(`/artifacts/${item.id}`); }}>
                  <span className="title">{item.query || item.id}</span>
                  <span className="meta">gen {item.generation} · {item.origin} · {item.nodeCount} nodes</span>
                </button>
              </li>
            ))}
          </ul>
        )}
      </aside>
      <section className="pane" aria-label="Artifact">
        {compared ? <Comparison key={compared.join()} token={token} ids={compared} />
          : selected ? <ArtifactView key={selected} token={token} id={selected} go={go} /> : <p>Choose an artifact.</p>}
      </section>
    </div>
  );
}

function ArtifactView({ token, id, go }: { token: string; id: string; go: (to: string) => void }) {
  const [artifact, setArtifact] = useState<Artifact | null>(null);
  const [lineage, setLineage] = useState<{ ancestors: Relative[]; descendants: Relative[]; truncated: boolean } | null>(null);
  const [examples, setExamples] = useState<Example[] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    Promise.all([
      api<Artifact>(token, `/api/artifacts/${id}?includePreview=true`),
      api<{ ancestors: Relative[]; descendants: Relative[]; truncated: boolean }>(token, `/api/artifacts/${id}/lineage?direction=both`),
      api<{ examples: Example[] }>(token, `/api/artifacts/${id}/rag-influence`),
    ]).then(([found, tree, influence]) => { setArtifact(found); setLineage(tree); setExamples(influence.examples); })
      .catch((failure) => setError(message(failure)));
  }, [token, id]);

  if (error) return <p role="alert" className="error">{error}</p>;
  if (!artifact || !lineage || !examples) return <p>Loading…</p>;
  const focus: Relative = { id: artifact.id, parentId: artifact.parentId, generation: artifact.generation, distance: 0, removed: false };
  const { nodes, edges } = lineageGraph(focus, lineage.ancestors, lineage.descendants);
  return (
    <article className="optimization" aria-labelledby="artifact-title">
      <h1 id="artifact-title">{artifact.query || artifact.id}</h1>
      <p>gen {artifact.generation} · {artifact.origin} · {artifact.nodeCount} nodes{artifact.model && <> · {artifact.model}</>}
        {artifact.tags.length > 0 && <> · {artifact.tags.join(", ")}</>}</p>
      <h2>Lineage</h2>
      <figure className="lineage" aria-label="Lineage tree">
        <ReactFlow nodes={nodes} edges={edges} fitView nodesDraggable={false} nodesConnectable={false}
          onNodeClick={(_, node) => { if (node.id !== artifact.id) go(`/artifacts/${node.id}`); }}
          proOptions={{ hideAttribution: true }}>
          <Background />
          <Controls showInteractive={false} />
        </ReactFlow>
        <figcaption>{lineage.ancestors.length} ancestors, {lineage.descendants.length} descendants
          {lineage.truncated && " (more descendants than shown)"}; choose a node to open it.</figcaption>
      </figure>
      <ul className="relatives" aria-label="Relatives">
        {[...lineage.ancestors, ...lineage.descendants].map((relative) => (
          <li key={relative.id}><button type="button" onClick={() => go(`/artifacts/${relative.id}`)}>
            gen {relative.generation} · {relative.id.slice(0, 8)}</button></li>
        ))}
      </ul>
      {artifact.variationSetId && <VariationSetView token={token} id={artifact.variationSetId} open={(other) => go(`/artifacts/${other}`)} />}
      <h2>Draft</h2>
      <pre className="draft">{artifact.draft}</pre>
      {artifact.previews.length > 0 && (<>
        <h2>Previews</h2>
        <div className="previews">
          {artifact.previews.map((preview) => preview.data && preview.format.match(/^(png|jpeg|jpg|webp|gif)$/) ? (
            <img key={preview.style + preview.format} alt={`${preview.style} preview`} src={`data:image/${preview.format};base64,${preview.data}`} />
          ) : <p key={preview.style + preview.format}>{preview.style} ({preview.format}, {preview.size} bytes)</p>)}
        </div>
      </>)}
      <h2>RAG influence</h2>
      {examples.length === 0 ? <p>Made from no retrieved example.</p> : (
        <table>
          <thead><tr><th scope="col">example</th><th scope="col">score</th><th scope="col">text</th></tr></thead>
          <tbody>{examples.map((example) => <tr key={example.id}><td>{example.id}</td><td>{example.score}</td><td>{example.text ?? ""}</td></tr>)}</tbody>
        </table>
      )}
    </article>
  );
}
