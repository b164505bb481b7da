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
