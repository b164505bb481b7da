"""A completed job's result as an artifact: a layout tree and a text draft of it, so lineage,
search and every artifact query see what the job made."""

from __future__ import annotations

from typing import Any


def quiz_layout(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "quiz",
        "label": str(result.get("title", "Quiz")),
        "children": [
            {
                "type": "question",
                "label": str(q["question"]),
                "children": [
                    {"type": "option", "label": str(option), "correct": option == q["correct_answer"]} for option in q["options"]
                ]
                + [{"type": "explanation", "label": str(q["explanation"])}],
            }
            for q in result["questions"]
        ],
    }


def summary_layout(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "summary",
        "label": str(result.get("title", "Summary")),
        "children": [{"type": "text", "label": str(result["summary"])}]
        + [{"type": "list", "children": [{"type": "list_item", "label": str(p)} for p in result["key_points"]]}],
    }


def draft_lines(node: dict[str, Any], depth: int = 0) -> list[str]:
    line = "  " * depth + str(node.get("type")) + (f": {node['label']}" if node.get("label") else "")
    return [line] + [line for child in node.get("children", []) for line in draft_lines(child, depth + 1)]


def artifact_of(artifact_type: str, result: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(layout, draft) of a validated result of this artifact type."""
    if artifact_type == "layout":
        layout = result["layout"]
        return layout, str(result.get("draft") or "\n".join(draft_lines(layout)))
    layout = quiz_layout(result) if artifact_type == "quiz" else summary_layout(result)
    return layout, "\n".join(draft_lines(layout))
