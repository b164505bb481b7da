// The optimization's pictures, drawn by recharts: the best-so-far curve (invalidated trials
// marked), each round's scores, and the Pareto front over all trials.
import { CartesianGrid, Legend, Scatter, ScatterChart, Tooltip, XAxis, YAxis, ZAxis } from "recharts";
import type { CurvePoint, Direction, Round } from "./model";

const WIDTH = 720;
const HEIGHT = 300;

function Cross(props: { cx?: number; cy?: number }) {
  const { cx = 0, cy = 0 } = props;
  return <path d={`M${cx - 5},${cy - 5}L${cx + 5},${cy + 5}M${cx - 5},${cy + 5}L${cx + 5},${cy - 5}`} stroke="#b00020" strokeWidth={2} />;
}

export function BestSoFarChart({ curve, direction }: { curve: CurvePoint[]; direction: Direction }) {
  // Three series of their own points: the best so far as a stepped line, each valid trial's
  // score, and each invalidated trial's score marked ✕ (left out of the best).
  const best = curve.filter((point) => point.bestSoFar !== null).map((point) => ({ trialIndex: point.trialIndex, y: point.bestSoFar }));
  const valid = curve.filter((point) => !point.invalid && point.score !== null).map((point) => ({ trialIndex: point.trialIndex, y: point.score }));
  const invalid = curve.filter((point) => point.invalid && point.score !== null)
    .map((point) => ({ trialIndex: point.trialIndex, y: point.score, reason: point.reason }));
  return (
    <figure className="chart" aria-label={`Best so far (${direction})`}>
      <ScatterChart width={WIDTH} height={HEIGHT} margin={{ top: 10, right: 20, bottom: 20, left: 10 }}>
        <CartesianGrid strokeDasharray="3 3" />
        <XAxis dataKey="trialIndex" type="number" name="trial" allowDecimals={false}
          label={{ value: "trial", position: "insideBottom", offset: -10 }} />
        <YAxis dataKey="y" type="number" name="score" domain={["auto", "auto"]} />
        <ZAxis range={[36, 36]} />
        <Tooltip />
        <Legend verticalAlign="top" />
        <Scatter data={best} name={`best so far (${direction})`} fill="#1f4f8f" line={{ stroke: "#1f4f8f", strokeWidth: 2 }}
          lineType="joint" shape={<g />} className="best-so-far" isAnimationActive={false} />
        <Scatter data={valid} name="trial score" fill="#6b8fc7" className="scores" isAnimationActive={false} />
        <Scatter data={invalid} name="invalidated" shape={<Cross />} fill="#b00020" className="invalidated" isAnimationActive={false} />
      </ScatterChart>
      <figcaption>{invalid.length} invalidated {invalid.length === 1 ? "trial" : "trials"} marked ✕, left out of the best.</figcaption>
    </figure>
  );
}

export function RoundScores({ rounds }: { rounds: Round[] }) {
  const points = rounds.flatMap((round) => round.trials.filter((t) => t.score !== null && !t.invalid)
    .map((t) => ({ round: round.roundIndex, score: t.score })));
  return (
    <figure className="chart" aria-label="Scores per round">
      <ScatterChart width={WIDTH} height={240} margin={{ top: 10, right: 20, bottom: 20, left: 10 }}>
        <CartesianGrid strokeDasharray="3 3" />
        <XAxis dataKey="round" type="number" name="round" allowDecimals={false} label={{ value: "round", position: "insideBottom", offset: -10 }} />
        <YAxis dataKey="score" type="number" name="score" domain={["auto", "auto"]} />
        <ZAxis range={[30, 30]} />
        <Tooltip />
        <Scatter data={points} fill="#1f4f8f" fillOpacity={0.5} isAnimationActive={false} />
      </ScatterChart>
      <figcaption>Each round's trial scores (valid trials).</figcaption>
    </figure>
  );
}

export interface ObjectivePoint { x: number; y: number; candidateId: string | null; trialIndex: number }

export function ParetoChart({ all, front, names, pick }: {
  all: ObjectivePoint[]; front: ObjectivePoint[]; names: [string, string]; pick: (point: ObjectivePoint) => void;
}) {
  return (
    <figure className="chart" aria-label="Pareto front">
      <ScatterChart width={WIDTH} height={HEIGHT} margin={{ top: 10, right: 20, bottom: 20, left: 10 }}>
        <CartesianGrid strokeDasharray="3 3" />
        <XAxis dataKey="x" type="number" name={names[0]} domain={["auto", "auto"]} label={{ value: names[0], position: "insideBottom", offset: -10 }} />
        <YAxis dataKey="y" type="number" name={names[1]} domain={["auto", "auto"]} />
        <ZAxis range={[40, 40]} />
        <Tooltip />
        <Legend verticalAlign="top" />
        <Scatter data={all} name="trials" fill="#9aa5b4" isAnimationActive={false} />
        <Scatter data={front} name="Pareto front" fill="#d35400" line isAnimationActive={false}
          onClick={(point) => pick(point as unknown as ObjectivePoint)} />
      </ScatterChart>
    </figure>
  );
}
