import { afterEach, describe, expect, it, vi } from "vitest";
import { EventParser, followAgain } from "./sse";

describe("EventParser", () => {
  it("joins chunks split anywhere and skips keep-alive comments", () => {
    const parser = new EventParser();
    expect(parser.feed("event: pau")).toEqual([]);
    expect(parser.feed('sed\ndata: {"runId":"r1"}\n\n: keep-alive\n\nevent: ready\r\ndata: {}\r\n\r\n')).toEqual([
      { event: "paused", data: '{"runId":"r1"}' },
      { event: "ready", data: "{}" },
    ]);
  });

  it("names an event without `event:` a message and joins its data lines", () => {
    expect(new EventParser().feed("data: a\ndata: b\n\n")).toEqual([{ event: "message", data: "a\nb" }]);
  });
});

function stream(text: string): Response {
  return new Response(text, { status: 200, headers: { "Content-Type": "text/event-stream" } });
}

describe("followAgain", () => {
  afterEach(() => {
    vi.useRealTimers();
    vi.unstubAllGlobals();
  });

  it("follows again each time the server ends the stream, until `between` says the end came", async () => {
    const bodies = ["event: progress\ndata: 20\n\n", "event: progress\ndata: 60\n\n", "event: job\ndata: done\n\n"];
    const fetch = vi.fn(async () => stream(bodies[fetch.mock.calls.length - 1]));
    vi.stubGlobal("fetch", fetch);
    const seen: string[] = [];
    const gaps: unknown[] = [];
    await followAgain("t", "/api/jobs/j/events", (event) => seen.push(`${event.event} ${event.data}`), new AbortController().signal,
      (failure) => { gaps.push(failure); return gaps.length < 3; }, 0);
    expect(seen).toEqual(["progress 20", "progress 60", "job done"]);
    expect(gaps).toEqual([null, null, null]);
    expect(fetch).toHaveBeenCalledTimes(3);
  });

  it("waits twice as long after each failure in a row, and stops waiting when aborted", async () => {
    vi.useFakeTimers();
    const fetch = vi.fn(async () => { throw new TypeError("connection refused"); });
    vi.stubGlobal("fetch", fetch);
    const abort = new AbortController();
    const gaps: unknown[] = [];
    const following = followAgain("t", "/api/hitl/events", () => undefined, abort.signal, (failure) => { gaps.push(failure); return true; }, 1000);
    await vi.advanceTimersByTimeAsync(0);
    expect(fetch).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(1999);
    expect(fetch).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(fetch).toHaveBeenCalledTimes(2); // after 2 s
    await vi.advanceTimersByTimeAsync(3999);
    expect(fetch).toHaveBeenCalledTimes(2);
    await vi.advanceTimersByTimeAsync(1);
    expect(fetch).toHaveBeenCalledTimes(3); // after 4 s more
    expect(gaps.every((gap) => gap instanceof TypeError)).toBe(true);
    abort.abort();
    await following; // (resolves with no timer run: the wait ends with the abort)
    expect(fetch).toHaveBeenCalledTimes(3);
  });
});
