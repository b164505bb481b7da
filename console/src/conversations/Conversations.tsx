// The conversations section: the sidebar beside the open conversation (/conversations/:id).
import { useCallback, useState } from "react";
import { ApiError } from "../api";
import { ConversationView } from "./ConversationView";
import { Sidebar } from "./Sidebar";

export function Conversations({ token, path, go, onUnauthorized }: {
  token: string; path: string; go: (to: string) => void; onUnauthorized: () => void;
}) {
  const selected = path.split("/")[2] || null;
  const [version, setVersion] = useState(0);
  const [error, setError] = useState<string | null>(null);
  const failed = useCallback((failure: unknown) => {
    if (failure instanceof ApiError && failure.code === "unauthorized") onUnauthorized();
    else setError(failure instanceof Error ? failure.message : String(failure));
  }, [onUnauthorized]);

  return (
    <div className="conversations">
      <Sidebar token={token} selected={selected} open={(id) => { setError(null); go(`/conversations/${id}`); }} version={version}
        onError={failed} />
      <section className="pane" aria-label="Conversation">
        {error && <p role="alert" className="error">{error}</p>}
        {selected ? (
          <ConversationView key={selected} token={token} id={selected} changed={() => setVersion((n) => n + 1)}
            deleted={() => { setVersion((n) => n + 1); go("/conversations"); }} />
        ) : <p>Choose a conversation.</p>}
      </section>
    </div>
  );
}
