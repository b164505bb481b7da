import { render } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { Snippet, snippetParts } from "./Snippet";

describe("Snippet", () => {
  it("marks the matched words", () => {
    expect(snippetParts("a <mark>sunset</mark> at <mark>sea</mark>")).toEqual([
      { text: "a ", marked: false }, { text: "sunset", marked: true }, { text: " at ", marked: false }, { text: "sea", marked: true },
    ]);
  });

  it("renders the user's text as text, never as HTML", () => {
    const { container } = render(<Snippet snippet={'<img src=x onerror="alert(1)"> <mark>match</mark>'} />);
    expect(container.querySelector("img")).toBeNull();
    expect(container.querySelector("mark")?.textContent).toBe("match");
    expect(container.textContent).toContain('<img src=x onerror="alert(1)">');
  });
});
