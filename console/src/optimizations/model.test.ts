import { describe, expect, it } from "vitest";
import { bestSoFarCurve, objectivesOf, type Round } from "./model";

const trial = (trialIndex: number, score: number | null, invalid = false, metrics = {}) =>
  ({ trialIndex, score, candidateId: null, metrics, ...(invalid ? { invalid: { reason: "leak", at: "" } } : {}) });

describe("bestSoFarCurve", () => {
  const rounds: Round[] = [{ roundIndex: 0, bestScore: null, trials: [trial(0, 0.5), trial(1, 0.9, true), trial(2, 0.7)] },
    { roundIndex: 1, bestScore: null, trials: [trial(3, null), trial(4, 0.2)] }];

  it("follows the objective's direction and leaves invalidated trials out of the best", () => {
    expect(bestSoFarCurve(rounds, "maximize").map((p) => p.bestSoFar)).toEqual([0.5, 0.5, 0.7, 0.7, 0.7]);
    expect(bestSoFarCurve(rounds, "minimize").map((p) => p.bestSoFar)).toEqual([0.5, 0.5, 0.5, 0.5, 0.2]);
    expect(bestSoFarCurve(rounds, "maximize")[1]).toMatchObject({ invalid: true, reason: "leak", score: 0.9 });
    expect(bestSoFarCurve(rounds, "maximize")[0]).toMatchObject({ invalid: false, reason: null }); // (no `invalid` key)
  });
});

describe("objectivesOf", () => {
  it("lists the score, then the numeric metrics", () => {
    expect(objectivesOf([{ roundIndex: 0, bestScore: null, trials: [trial(0, 1, false, { cost: 2, label: "x" })] }])).toEqual(["score", "cost"]);
  });
});
