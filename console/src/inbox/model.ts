// A checkpoint as GET /api/hitl/runs answers it, and the form its `data` proposes.

export interface Run {
  runId: string;
  conversationId: string;
  status: "paused" | "resumed" | "expired";
  step: string;
  checkpointType: string;
  prompt: string;
  data: Record<string, unknown>;
  conversationMode: boolean;
  pausedAt: string;
  expiresAt: string | null;
  checkpoints: number;
}

export type Scalar = string | number | boolean | null;

/** The values a person may edit: `data.form` when the run proposes one (seed 004's
 * `{"form": {"aspect_ratio": "16:9"}}`), else `data`'s own scalar values. */
export function proposedValues(data: Record<string, unknown>): Record<string, Scalar> {
  const form = data.form;
  const source = form && typeof form === "object" && !Array.isArray(form) ? (form as Record<string, unknown>) : data;
  const values: Record<string, Scalar> = {};
  for (const [name, value] of Object.entries(source)) {
    if (value === null || ["string", "number", "boolean"].includes(typeof value)) values[name] = value as Scalar;
  }
  return values;
}

/** The fields whose value the person changed: what `edits` carries. */
export function changed(proposed: Record<string, Scalar>, edited: Record<string, Scalar>): Record<string, Scalar> {
  return Object.fromEntries(Object.entries(edited).filter(([name, value]) => proposed[name] !== value));
}

/** Oldest pause first. */
export function oldestFirst(runs: Iterable<Run>): Run[] {
  return [...runs].sort((a, b) => a.pausedAt.localeCompare(b.pausedAt) || a.runId.localeCompare(b.runId));
}
