import { render, screen, waitFor, within } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { Jobs } from "./Jobs";

const JOB = { jobId: "j1", artifactType: "summary", result: null, error: null, createdAt: "2026-01-01T00:00:00Z" };

function json(body: unknown): Response {
  return new Response(JSON.stringify({ success: true, ...(body as object) }), { status: 200 });
}

function sse(...events: [string, unknown][]): Response {
  return new Response(events.map(([event, data]) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`).join(""), { status: 200 });
}

describe("Jobs", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("follows a running job again when the gateway ends its stream, up to its result", async () => {
    const done = { ...JOB, status: "completed", progress: 100, result: { key_points: ["water boils"] } };
    const streams = [
      // The first stream ends (the gateway's time limit) while the job is still at 20.
      sse(["job", { ...JOB, status: "planning", progress: 0 }], ["progress", { progress: 20, status: "planning" }]),
      sse(["job", { ...JOB, status: "generating", progress: 20 }], ["progress", { progress: 60, status: "generating" }],
        ["progress", { progress: 100, status: "completed" }], ["job", done]),
    ];
    const looks: string[] = [];
    vi.stubGlobal("fetch", vi.fn(async (path: string) => {
      if (path === "/api/jobs?limit=50") return json({ items: [{ ...JOB, status: "planning", progress: 0 }] });
      if (path === "/api/jobs/j1/events") return streams.shift() ?? new Response("", { status: 200 });
      looks.push(path); // the job itself, read between two streams
      return json(looks.length === 1 ? { ...JOB, status: "generating", progress: 20 } : done);
    }));

    render(<Jobs token="t" />);
    const job = await screen.findByRole("listitem");
    const bar = within(job).getByRole("progressbar");
    await waitFor(() => expect(bar.getAttribute("value")).toBe("100"), { timeout: 4000 });
    await waitFor(() => expect(within(job).getByRole("group").textContent).toContain("water boils"));
    expect(streams).toEqual([]); // both streams were followed
    expect(looks[0]).toBe("/api/jobs/j1");
  });
});
