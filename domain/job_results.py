"""What each artifact type's job must produce, and the problems with a result that falls short."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from domain.errors import InvalidCommand
from domain.layout import check_layout

ARTIFACT_TYPES = ("quiz", "summary", "layout")
MAX_PROBLEMS = 20  # enough to fix a reply by, without one broken 50-question quiz flooding an event

# Problems reach events, logs and retry prompts, so they name paths and rules, never values:
# pydantic's own wording is kept only where it cannot echo the input.
_RULES = {
    "missing": "is required",
    "extra_forbidden": "has a field the schema does not allow",
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "string_type": "must be a string",
    "list_type": "must be a list",
}


class _Broken(ValueError):
    """A rule broken below the field whose validator found it; `where` extends the path (".correct_answer")."""

    def __init__(self, where: str, rule: str):
        super().__init__(rule)
        self.where, self.rule = where, rule


def _non_blank(text: str) -> str:
    if not text.strip():
        raise _Broken("", "must not be blank")
    return text


NonBlank = Annotated[str, AfterValidator(_non_blank)]


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class QuizQuestion(_Result):
    question: str
    options: list[NonBlank] = Field(min_length=2, max_length=8)
    correct_answer: str
    explanation: NonBlank

    @field_validator("options")
    @classmethod
    def _distinct(cls, options: list[str]) -> list[str]:
        seen: set[str] = set()
        for index, option in enumerate(options):
            # Options that differ only in case or spacing read as the same choice.
            key = option.strip().casefold()
            if key in seen:
                raise _Broken(f"[{index}]", "duplicates an earlier option")
            seen.add(key)
        return options

    @model_validator(mode="after")
    def _answer_is_an_option(self) -> QuizQuestion:
        if self.correct_answer not in self.options:
            raise _Broken(".correct_answer", "must be one of the options")
        return self


class Quiz(_Result):
    title: str
    questions: list[QuizQuestion] = Field(min_length=1, max_length=50)


class Summary(_Result):
    title: str
    summary: NonBlank
    key_points: list[NonBlank] = Field(min_length=1, max_length=20)


class LayoutResult(_Result):
    layout: Any
    draft: str

    @field_validator("layout")
    @classmethod
    def _valid_tree(cls, layout: Any) -> Any:
        try:
            check_layout(layout)
        except InvalidCommand as error:
            path = error.field or "layout"
            raise _Broken(path.removeprefix("layout"), error.message.removeprefix(path).strip()) from None
        return layout


def quiz_with_correct_answers(result: dict[str, Any]) -> dict[str, Any]:
    """A quiz result as recorded before seed 002's field names were followed (`answer`),
    with `correct_answer` instead; any other result as it is."""
    questions = result.get("questions")
    if not isinstance(questions, list):
        return result
    renamed = [
        {("correct_answer" if key == "answer" else key): value for key, value in question.items()}
        if isinstance(question, dict) and "answer" in question and "correct_answer" not in question
        else question
        for question in questions
    ]
    return {**result, "questions": renamed}


SCHEMAS: dict[str, type[_Result]] = {"quiz": Quiz, "summary": Summary, "layout": LayoutResult}


def _path(location: tuple[int | str, ...]) -> str:
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in location).lstrip(".")
    return path or "result"


def _problem(error: Any) -> str:
    location, kind = tuple(error["loc"]), error["type"]
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, _Broken):
        return f"{_path(location)}{cause.where}: {cause.rule}"
    if kind == "extra_forbidden":  # the unknown key itself may be anything, so only its parent is named
        return f"{_path(location[:-1])}: {_RULES[kind]}"
    if kind in ("too_short", "too_long"):
        bound = error["ctx"]["min_length" if kind == "too_short" else "max_length"]
        limit = "at least" if kind == "too_short" else "at most"
        return f"{_path(location)}: must have {limit} {bound} item{'' if bound == 1 else 's'}"
    rule = _RULES.get(kind) or error["msg"][:1].lower() + error["msg"][1:]
    return f"{_path(location)}: {rule}"


def problems_with(artifact_type: str, result: Any) -> list[str]:
    """Why `result` is not a valid `artifact_type` result, one line per broken rule; [] when it is valid."""
    schema = SCHEMAS.get(artifact_type)
    if schema is None:
        return [f"artifact_type: must be one of {', '.join(ARTIFACT_TYPES)}"]
    try:
        schema.model_validate(result)
    except ValidationError as error:
        problems = list(dict.fromkeys(_problem(detail) for detail in error.errors()))
        if len(problems) > MAX_PROBLEMS:
            problems[MAX_PROBLEMS:] = [f"and {len(problems) - MAX_PROBLEMS} more problems"]
        return problems
    return []
