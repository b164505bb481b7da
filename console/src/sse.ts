// Server-Sent Events over fetch: EventSource cannot send the Authorization header.

export interface ServerEvent {
  event: string;
  data: string;
}

/** Splits a stream's text into events; feed it chunks, it returns the events completed so far. */
export class EventParser {
  private buffer = "";

  feed(chunk: string): ServerEvent[] {
    this.buffer += chunk.replace(/\r\n?/g, "\n");
    const events: ServerEvent[] = [];
    let end: number;
    while ((end = this.buffer.indexOf("\n\n")) >= 0) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      let event = "message";
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue; // a comment (keep-alive)
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
      }
      if (data.length) events.push({ event, data: data.join("\n") });
    }
    return events;
  }
}

/** Follows `path` until `signal` aborts or the stream ends; resolves then (the caller reconnects). */
export async function follow(
  token: string,
  path: string,
  onEvent: (event: ServerEvent) => void,
  signal: AbortSignal,
): Promise<void> {
  const response = await fetch(path, { headers: { Authorization: `Bearer ${token}`, Accept: "text/event-stream" }, signal });
  if (!response.ok || !response.body) throw new Error(`events: HTTP ${response.status}`);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new EventParser();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    for (const event of parser.feed(value)) onEvent(event);
  }
}

export const RECONNECT_MS = 1000;
const MOST_RECONNECT_MS = 10_000;

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

/**
 * Follows `path` again whenever its stream ends (the gateway ends every stream after a time
 * limit, or when a connection drops) until `signal` aborts or `between` says not to. `between`
 * hears the failure that ended a connection (null when the server closed it): it catches up on
 * what the gap may have missed and returns whether to follow again. A stream the server closed
 * is followed again after `delayMs`; each failure in a row doubles the wait, up to 10 s.
 */
export async function followAgain(
  token: string,
  path: string,
  onEvent: (event: ServerEvent) => void,
  signal: AbortSignal,
  between: (failure: unknown) => Promise<boolean> | boolean,
  delayMs: number = RECONNECT_MS,
): Promise<void> {
  let failures = 0; // in a row
  while (!signal.aborted) {
    let failure: unknown = null;
    try {
      await follow(token, path, onEvent, signal);
    } catch (caught) {
      failure = caught;
    }
    if (signal.aborted || !(await between(failure))) return;
    failures = failure === null ? 0 : failures + 1;
    await pause(Math.min(delayMs * 2 ** failures, MOST_RECONNECT_MS), signal);
  }
}
