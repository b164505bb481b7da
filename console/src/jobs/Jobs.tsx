// The jobs section: the caller's generation jobs with live progress bars (each running job
// followed over GET /api/jobs/{jobId}/events, again whenever the gateway ends the stream),
// the result when done; a form to request one.
import { useCallback, useEffect, useState } from "react";
import { api, ApiError } from "../api";
import { followAgain } from "../sse";

interface Job {
  jobId: string;
  artifactType: string;
  status: string;
  progress: number;
  result: Record<string, unknown> | null;
  error: string | null;
  createdAt: string;
}

const ENDED = new Set(["completed", "failed"]);
const TYPES = ["summary", "quiz", "layout"];

function message(failure: unknown): string {
  return failure instanceof ApiError ? failure.message : String(failure);
}

export function Jobs({ token }: { token: string }) {
  const [jobs, setJobs] = useState<Job[] | null>(null);
  const [content, setContent] = useState("");
  const [artifactType, setArtifactType] = useState(TYPES[0]);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    api<{ items: Job[] }>(token, "/api/jobs?limit=50").then((body) => setJobs(body.items)).catch((failure) => setError(message(failure)));
  }, [token]);

  const update = useCallback((job: Partial<Job> & { jobId: string }) =>
    setJobs((now) => (now ?? []).map((known) => (known.jobId === job.jobId ? { ...known, ...job } : known))), []);

  async function request(event: React.FormEvent) {
    event.preventDefault();
    setError(null);
    try {
      const requested = await api<{ jobId: string }>(token, "/api/jobs", { method: "POST", body: { content, artifactType } });
      const job = await api<Job>(token, `/api/jobs/${requested.jobId}`);
      setJobs((now) => [job, ...(now ?? []).filter((known) => known.jobId !== job.jobId)]);
      setContent("");
    } catch (failure) {
      setError(message(failure));
    }
  }

  return (
    <div className="jobs">
      <h1>Jobs</h1>
      <form onSubmit={request} className="request">
        <label htmlFor="job-content">Content to turn into a study aid</label>
        <textarea id="job-content" rows={3} value={content} onChange={(e) => setContent(e.target.value)} />
        <label htmlFor="job-type">Kind</label>
        <select id="job-type" value={artifactType} onChange={(e) => setArtifactType(e.target.value)}>
          {TYPES.map((type) => <option key={type} value={type}>{type}</option>)}
        </select>
        <div className="actions"><button type="submit" disabled={!content.trim()}>Request</button></div>
      </form>
      {error && <p role="alert" className="error">{error}</p>}
      {jobs === null ? <p>Loading…</p> : jobs.length === 0 ? <p>No jobs.</p> : (
        <ul className="job-list" aria-label="Your jobs">
          {jobs.map((job) => <JobRow key={job.jobId} token={token} job={job} update={update} />)}
        </ul>
      )}
    </div>
  );
}

function JobRow({ token, job, update }: { token: string; job: Job; update: (job: Partial<Job> & { jobId: string }) => void }) {
  const ended = ENDED.has(job.status);
  useEffect(() => {
    if (ended) return;
    const abort = new AbortController();
    // Between two streams: the job now (what the gap missed), and whether it is still running.
    const between = async () => {
      try {
        const now = await api<Job>(token, `/api/jobs/${job.jobId}`, { signal: abort.signal });
        update(now);
        return !ENDED.has(now.status);
      } catch (failure) {
        return !(failure instanceof ApiError && failure.code === "unauthorized");
      }
    };
    void followAgain(token, `/api/jobs/${job.jobId}/events`, (event) => {
      const data = JSON.parse(event.data) as Partial<Job>;
      if (event.event === "job") update({ ...data, jobId: job.jobId });
      else if (event.event === "progress" && typeof data.progress === "number") {
        // (the job's own state, result included, follows as `job`: this row stays on the stream till then)
        const running = data.status && !ENDED.has(data.status) ? { status: data.status } : {};
        update({ jobId: job.jobId, progress: data.progress, ...running });
      }
    }, abort.signal, between);
    return () => abort.abort();
  }, [token, job.jobId, ended, update]);

  const label = `${job.artifactType} job ${job.jobId.slice(0, 8)}`;
  return (
    <li className="job">
      <span className="title">{label}</span> <span className="meta">{job.status}</span>
      <progress max={100} value={job.progress} aria-label={`${label} progress`}>{job.progress}%</progress>
      <span className="meta">{job.progress}%</span>
      {job.error && <p className="error">{job.error}</p>}
      {job.status === "completed" && job.result && (
        <details open>
          <summary>Result</summary>
          <pre className="draft">{JSON.stringify(job.result, null, 2)}</pre>
        </details>
      )}
    </li>
  );
}
