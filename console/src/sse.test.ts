import { describe, expect, it } from "vitest";
import { EventParser } from "./sse";

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
