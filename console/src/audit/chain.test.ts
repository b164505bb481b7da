import { describe, expect, it } from "vitest";
import { chainSummary, withSpan, type ChainSpan } from "./chain";

function span(fields: Partial<ChainSpan>): ChainSpan {
  return { aggregateId: "a", eventsChecked: 0, intact: true, breaks: [], throughVersion: null, nextAfterVersion: null, ...fields };
}

describe("chain status", () => {
  it("says an untouched stream holds", () => {
    expect(chainSummary(withSpan(undefined, span({ eventsChecked: 6, throughVersion: 6 })))).toBe("holds, 6 events checked");
    expect(chainSummary(withSpan(undefined, span({ eventsChecked: 1, throughVersion: 1 })))).toBe("holds, 1 event checked");
  });

  it("names the first break's version and counts the others", () => {
    const status = withSpan(undefined, span({
      eventsChecked: 9, intact: false, throughVersion: 9,
      breaks: [{ version: 3, reason: "missing" }, { version: 4, reason: "hash mismatch" }],
    }));
    expect(chainSummary(status)).toBe("broken at version 3 (missing; 1 more break), 9 events checked");
  });

  it("folds the spans of a long stream, a break in a later span included", () => {
    const first = withSpan(undefined, span({ eventsChecked: 1000, throughVersion: 1000, nextAfterVersion: 1000 }));
    expect(chainSummary(first)).toBe("holds through version 1000, 1000 events checked; later events not checked yet");
    const second = withSpan(first, span({
      eventsChecked: 20, intact: false, throughVersion: 1020, breaks: [{ version: 1007, reason: "hash mismatch" }],
    }));
    expect(second).toEqual({
      eventsChecked: 1020, breaks: [{ version: 1007, reason: "hash mismatch" }], throughVersion: 1020, nextAfterVersion: null,
    });
    expect(chainSummary(second)).toBe("broken at version 1007 (hash mismatch), 1020 events checked");
  });
});
