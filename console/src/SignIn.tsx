// Sign-in: paste a bearer token, or (a browser on the service's own machine, embedded default) one click.
import { useEffect, useState } from "react";
import { ApiError, type Json } from "./api";

export function SignIn({ onToken }: { onToken: (token: string) => void }) {
  const [token, setToken] = useState("");
  const [local, setLocal] = useState(false);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    fetch("/api/console/local-sign-in")
      .then((response) => response.json() as Promise<Json>)
      .then((body) => setLocal(body.available === true))
      .catch(() => setLocal(false));
  }, []);

  async function signInLocally() {
    setError(null);
    const response = await fetch("/api/console/local-sign-in", { method: "POST" });
    const body = (await response.json()) as Json;
    if (body.success === true && typeof body.token === "string") onToken(body.token);
    else setError(((body.error as Json | undefined)?.message as string | undefined) ?? "local sign-in failed");
  }

  async function signInWithToken(event: React.FormEvent) {
    event.preventDefault();
    setError(null);
    const pasted = token.trim();
    const response = await fetch("/api/hitl/runs?limit=1", { headers: { Authorization: `Bearer ${pasted}` } });
    if (response.ok) onToken(pasted);
    else {
      const body = (await response.json().catch(() => ({}))) as Json;
      const failure = (body.error ?? {}) as { code?: string; message?: string };
      setError(new ApiError(failure.code ?? "unauthorized", failure.message ?? "token refused", response.status).message);
    }
  }

  return (
    <main className="sign-in">
      <h1>Chronicle console</h1>
      <form onSubmit={signInWithToken} aria-label="Sign in with a token">
        <label htmlFor="token">Bearer token</label>
        <textarea id="token" value={token} onChange={(e) => setToken(e.target.value)} rows={4} autoComplete="off"
          spellCheck={false} placeholder="./dev chronicle token alice" />
        <button type="submit" disabled={!token.trim()}>Sign in</button>
      </form>
      {local && (
        <p>
          <button type="button" onClick={signInLocally}>Sign in on this machine</button>
        </p>
      )}
      {error && <p role="alert" className="error">{error}</p>}
    </main>
  );
}
