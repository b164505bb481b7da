"""Domain errors: raised by guard methods before any event is recorded."""

from __future__ import annotations


class DomainError(Exception):
    """A command broke a rule of the domain; `code` is the wire error code."""

    code = "invalid"

    def __init__(
        self, message: str, *, field: str | None = None, rule: str | None = None, context: dict | None = None
    ):
        super().__init__(message)
        self.message = message
        self.field = field
        self.rule = rule
        self.context = context or {}


class InvalidCommand(DomainError):
    code = "invalid"


class NotFound(DomainError):
    """Missing, deleted, or owned by someone else: callers cannot tell which."""

    code = "not_found"


class Conflict(DomainError):
    code = "conflict"
