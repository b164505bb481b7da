import { describe, expect, it } from "vitest";
import { changed, oldestFirst, proposedValues, type Run } from "./model";

describe("proposedValues", () => {
  it("takes data.form when the run proposes one", () => {
    expect(proposedValues({ error: "unsupported", form: { aspect_ratio: "16:9", steps: 30 } })).toEqual({ aspect_ratio: "16:9", steps: 30 });
  });
  it("else takes data's scalar values, leaving objects and lists out", () => {
    expect(proposedValues({ title: "x", ok: true, nested: { a: 1 }, list: [1] })).toEqual({ title: "x", ok: true });
  });
});

describe("changed", () => {
  it("keeps only the fields the person changed", () => {
    expect(changed({ a: "1", b: 2 }, { a: "1", b: 3 })).toEqual({ b: 3 });
  });
});

describe("oldestFirst", () => {
  it("orders by pause time", () => {
    const run = (runId: string, pausedAt: string) => ({ runId, pausedAt }) as Run;
    expect(oldestFirst([run("b", "2026-01-02T00:00:00Z"), run("a", "2026-01-01T00:00:00Z")]).map((r) => r.runId)).toEqual(["a", "b"]);
  });
});
