// An artifact's lineage as a drawn tree: nodes placed by generation (rows) and order within it.
import type { Edge, Node } from "@xyflow/react";

export interface Relative {
  id: string;
  parentId: string | null;
  generation: number;
  distance: number;
  removed: boolean;
}

const COLUMN = 200;
const ROW = 110;

export function lineageGraph(focus: Relative, ancestors: Relative[], descendants: Relative[]): { nodes: Node[]; edges: Edge[] } {
  const everyone = new Map<string, Relative>();
  for (const relative of [...ancestors, focus, ...descendants]) everyone.set(relative.id, relative);
  const rows = new Map<number, Relative[]>();
  for (const relative of everyone.values()) rows.set(relative.generation, [...(rows.get(relative.generation) ?? []), relative]);
  const nodes: Node[] = [];
  for (const [generation, members] of [...rows.entries()].sort((a, b) => a[0] - b[0])) {
    members.forEach((relative, n) => {
      nodes.push({
        id: relative.id,
        position: { x: (n - (members.length - 1) / 2) * COLUMN, y: generation * ROW },
        data: { label: `${relative.id === focus.id ? "▶ " : ""}gen ${relative.generation} · ${relative.id.slice(0, 8)}${relative.removed ? " (removed)" : ""}` },
        className: relative.id === focus.id ? "lineage-node focus" : "lineage-node",
      });
    });
  }
  const edges: Edge[] = [...everyone.values()].filter((r) => r.parentId !== null && everyone.has(r.parentId))
    .map((r) => ({ id: `${r.parentId}-${r.id}`, source: r.parentId as string, target: r.id }));
  return { nodes, edges };
}
