import { describe, expect, it } from "vitest";
import { lineageGraph, type Relative } from "./lineage";

const relative = (id: string, parentId: string | null, generation: number): Relative =>
  ({ id, parentId, generation, distance: 0, removed: false });

describe("lineageGraph", () => {
  it("places each generation on its row and links each child to its parent", () => {
    const { nodes, edges } = lineageGraph(relative("b", "a", 1), [relative("a", null, 0)], [relative("c", "b", 2), relative("d", "b", 2)]);
    expect(nodes.map((n) => [n.id, n.position.y])).toEqual([["a", 0], ["b", 110], ["c", 220], ["d", 220]]);
    expect(nodes.find((n) => n.id === "c")!.position.x).toBeLessThan(nodes.find((n) => n.id === "d")!.position.x);
    expect(edges.map((e) => [e.source, e.target])).toEqual([["a", "b"], ["b", "c"], ["b", "d"]]);
    expect(nodes.find((n) => n.id === "b")!.className).toContain("focus");
  });
});
