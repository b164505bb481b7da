// The console's frame: who is signed in, the sections, sign-out.
import { lazy, Suspense, useState } from "react";
import { forgetToken, saveToken, savedToken, tokenUser } from "./session";
import { SignIn } from "./SignIn";
import { Conversations } from "./conversations/Conversations";
import { Inbox } from "./inbox/Inbox";
import { Jobs } from "./jobs/Jobs";
import { Audit } from "./audit/Audit";
import { usePath } from "./router";

// The charts' library is most of the bundle: loaded when a section that draws is opened,
// so the inbox (the page a person waits on) loads without it.
const Optimizations = lazy(() => import("./optimizations/Optimizations").then((m) => ({ default: m.Optimizations })));

const Artifacts = lazy(() => import("./artifacts/Artifacts").then((m) => ({ default: m.Artifacts })));

const SECTIONS = [
  { path: "/inbox", label: "Inbox" },
  { path: "/conversations", label: "Conversations" },
  { path: "/optimizations", label: "Optimizations" },
  { path: "/artifacts", label: "Artifacts" },
  { path: "/jobs", label: "Jobs" },
  { path: "/audit", label: "Audit" },
];

function sectionOf(path: string): string {
  return SECTIONS.find((section) => path === section.path || path.startsWith(section.path + "/"))?.path ?? "/inbox";
}

export function App() {
  const [token, setToken] = useState<string | null>(savedToken());
  const [path, go] = usePath();

  if (!token) {
    return <SignIn onToken={(given) => { saveToken(given); setToken(given); }} />;
  }
  const signOut = () => { forgetToken(); setToken(null); };
  const section = sectionOf(path);
  return (
    <>
      <header className="bar">
        <span className="brand">Chronicle</span>
        <nav aria-label="Sections">
          {SECTIONS.map((section) => (
            <a key={section.path} href={section.path} aria-current={section.path === sectionOf(path) ? "page" : undefined}
              onClick={(event) => { event.preventDefault(); go(section.path); }}>{section.label}</a>
          ))}
        </nav>
        <span className="who">signed in as <strong>{tokenUser(token) ?? "?"}</strong></span>
        <button type="button" onClick={signOut}>Sign out</button>
      </header>
      <main>
        {section === "/conversations" ? <Conversations token={token} path={path} go={go} onUnauthorized={signOut} />
          : section === "/jobs" ? <Jobs token={token} />
          : section === "/audit" ? <Audit token={token} />
          : section === "/artifacts" ? <Suspense fallback={<p>Loading…</p>}><Artifacts token={token} path={path} go={go} /></Suspense>
          : section === "/optimizations" ? <Suspense fallback={<p>Loading…</p>}><Optimizations token={token} path={path} go={go} /></Suspense>
          : <Inbox token={token} onUnauthorized={signOut} />}
      </main>
    </>
  );
}
