import { fireEvent, render, screen } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { useState } from "react";
import { DataForm } from "./DataForm";
import type { Scalar } from "./model";

function Harness({ initial, seen }: { initial: Record<string, Scalar>; seen: Record<string, Scalar>[] }) {
  const [values, setValues] = useState(initial);
  return <DataForm values={values} onChange={(next) => { seen.push(next); setValues(next); }} />;
}

describe("DataForm", () => {
  it("labels an input per value, typed by the value, and reports edits", () => {
    const seen: Record<string, Scalar>[] = [];
    render(<Harness initial={{ aspect_ratio: "16:9", steps: 30, upscale: false }} seen={seen} />);
    fireEvent.change(screen.getByLabelText("aspect_ratio"), { target: { value: "1:1" } });
    fireEvent.change(screen.getByLabelText("steps"), { target: { value: "40" } });
    fireEvent.click(screen.getByLabelText("upscale"));
    expect(seen.at(-1)).toEqual({ aspect_ratio: "1:1", steps: 40, upscale: true });
    expect((screen.getByLabelText("steps") as HTMLInputElement).type).toBe("number");
  });

  it("draws nothing when nothing is proposed", () => {
    const { container } = render(<DataForm values={{}} onChange={() => undefined} />);
    expect(container.innerHTML).toBe("");
  });
});
