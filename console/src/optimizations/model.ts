// Optimizations as the REST API answers them, and what the charts draw from them.

export type Direction = "maximize" | "minimize";

export interface Optimization {
  optimizationId: string;
  name: string;
  optimizer: string;
  direction: Direction;
  rounds: number;
  trials: number;
  bestScore: number | null;
  invalidTrials: number;
  stopped: boolean;
  stopReason: string | null;
  updatedAt: string;
}

export interface Trial {
  trialIndex: number;
  score: number | null;
  candidateId: string | null;
  metrics: Record<string, unknown>;
  invalid?: { reason: string; at: string } | null; // (absent while the trial counts)
}

export interface Round {
  roundIndex: number;
  trials: Trial[];
  bestScore: number | null;
}

export interface CurvePoint {
  trialIndex: number;
  score: number | null;
  bestSoFar: number | null;
  invalid: boolean;
  reason: string | null;
}

/** Each trial in order, with the best so far in the objective's direction, invalidated trials
 * left out of the best (but kept, marked, as points). */
export function bestSoFarCurve(rounds: Round[], direction: Direction): CurvePoint[] {
  const better = (a: number, b: number) => (direction === "maximize" ? a > b : a < b);
  const trials = rounds.flatMap((round) => round.trials).sort((a, b) => a.trialIndex - b.trialIndex);
  let best: number | null = null;
  return trials.map((trial) => {
    if (!trial.invalid && trial.score !== null && (best === null || better(trial.score, best))) best = trial.score;
    return { trialIndex: trial.trialIndex, score: trial.score, bestSoFar: best, invalid: Boolean(trial.invalid),
      reason: trial.invalid?.reason ?? null };
  });
}

/** The numeric objectives trials carry: the score, then each numeric metric. */
export function objectivesOf(rounds: Round[]): string[] {
  const names = new Set<string>(["score"]);
  for (const trial of rounds.flatMap((round) => round.trials)) {
    for (const [name, value] of Object.entries(trial.metrics)) if (typeof value === "number") names.add(name);
  }
  return [...names];
}
