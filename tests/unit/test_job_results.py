"""Each artifact type's result schema: valid results pass, each broken rule is named by its path."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from domain.job_results import ARTIFACT_TYPES, MAX_PROBLEMS, problems_with

SECRET = "Tiramisu-7731"  # stands for the user's content: it must never reach a problem


def question(**changes: Any) -> dict[str, Any]:
    return {
        "question": f"Which dessert is {SECRET}?",
        "options": [SECRET, "Flan", "Baklava"],
        "correct_answer": SECRET,
        "explanation": f"The source says {SECRET}.",
    } | changes


def quiz(*questions: dict[str, Any]) -> dict[str, Any]:
    return {"title": f"All about {SECRET}", "questions": list(questions) or [question()]}


SUMMARY = {"title": SECRET, "summary": f"{SECRET} is layered.", "key_points": [SECRET, "Coffee"]}
LAYOUT = {
    "layout": {"type": "page", "label": SECRET, "children": [{"type": "text", "label": SECRET}]},
    "draft": f"page: {SECRET}",
}


def with_change(result: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(result)
    target = changed
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return changed


def test_the_types_are_the_three_known_ones() -> None:
    assert ARTIFACT_TYPES == ("quiz", "summary", "layout")
    assert problems_with("poem", {}) == ["artifact_type: must be one of quiz, summary, layout"]


@pytest.mark.parametrize(
    ("kind", "result"),
    [
        ("quiz", quiz()),
        ("quiz", quiz(*[question(options=[f"option {n}" for n in range(8)], correct_answer="option 7")] * 50)),
        ("quiz", quiz(question(question="", options=["yes", "no"], correct_answer="no"))),  # the question may be empty
        ("summary", SUMMARY),
        ("summary", SUMMARY | {"title": "", "key_points": [f"point {n}" for n in range(20)]}),
        ("layout", LAYOUT),
        ("layout", {"layout": {"type": "page"}, "draft": ""}),
    ],
)
def test_valid_results_have_no_problems(kind: str, result: Any) -> None:
    assert problems_with(kind, result) == []


@pytest.mark.parametrize(
    ("kind", "result", "expected"),
    [
        ("quiz", [quiz()], "result: must be an object"),
        ("quiz", {"questions": [question()]}, "title: is required"),
        ("quiz", quiz() | {"title": 7}, "title: must be a string"),
        ("quiz", quiz() | {SECRET: 1}, "result: has a field the schema does not allow"),
        ("quiz", quiz() | {"questions": []}, "questions: must have at least 1 item"),
        ("quiz", quiz(*[question()] * 51), "questions: must have at most 50 items"),
        ("quiz", quiz() | {"questions": {"0": question()}}, "questions: must be a list"),
        ("quiz", quiz(question(), question(correct_answer="Tiramisu")), "questions[1].correct_answer: must be one of the options"),
        ("quiz", quiz(question(options=[SECRET])), "questions[0].options: must have at least 2 items"),
        ("quiz", quiz(question(options=[SECRET, *"abcdefgh"])), "questions[0].options: must have at most 8 items"),
        ("quiz", quiz(question(options=[SECRET, "  "])), "questions[0].options[1]: must not be blank"),
        (
            "quiz",
            quiz(question(options=[SECRET, "Flan", " flan"])),
            "questions[0].options[2]: duplicates an earlier option",
        ),
        ("quiz", quiz(question(explanation=" \n")), "questions[0].explanation: must not be blank"),
        ("quiz", quiz(question(hint=SECRET)), "questions[0]: has a field the schema does not allow"),
        ("quiz", quiz(question(question=None)), "questions[0].question: must be a string"),
        ("summary", SUMMARY | {"summary": "   "}, "summary: must not be blank"),
        ("summary", SUMMARY | {"key_points": []}, "key_points: must have at least 1 item"),
        ("summary", SUMMARY | {"key_points": ["x"] * 21}, "key_points: must have at most 20 items"),
        ("summary", SUMMARY | {"key_points": [SECRET, ""]}, "key_points[1]: must not be blank"),
        ("summary", {"title": SECRET, "summary": SECRET}, "key_points: is required"),
        ("layout", {"draft": SECRET}, "layout: is required"),
        ("layout", LAYOUT | {"draft": None}, "draft: must be a string"),
        ("layout", LAYOUT | {"layout": [SECRET]}, "layout: must be an object"),
        (
            "layout",
            with_change(LAYOUT, ("layout", "children", 0, "type"), ""),
            "layout.children[0].type: must not be empty",
        ),
        (
            "layout",
            with_change(LAYOUT, ("layout", "children", 0, "label"), 3),
            "layout.children[0].label: must be a string",
        ),
    ],
)
def test_each_broken_rule_is_named_by_its_path_without_the_content(kind: str, result: Any, expected: str) -> None:
    problems = problems_with(kind, result)
    assert expected in problems
    assert not any(SECRET.lower() in problem.lower() for problem in problems)


def test_every_broken_question_is_reported() -> None:
    problems = problems_with("quiz", quiz(question(correct_answer="x"), question(), question(explanation="")))
    assert problems == [
        "questions[0].correct_answer: must be one of the options",
        "questions[2].explanation: must not be blank",
    ]


def test_a_flood_of_problems_is_cut_short() -> None:
    problems = problems_with("quiz", quiz(*[question(correct_answer="x")] * 50))
    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[-1] == f"and {50 - MAX_PROBLEMS} more problems"
