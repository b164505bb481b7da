"""Chronicle's error codes, and the one place that turns any failure into them."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from eventsourcing.persistence import OperationalError, PersistenceError
from pydantic import ValidationError

from domain.errors import DomainError

log = logging.getLogger(__name__)

CODES = ("invalid", "unauthorized", "not_found", "conflict", "rate_limited", "unavailable", "internal")


class ChronicleError(Exception):
    """A failure with a wire code; `details` name fields and the rules they broke."""

    def __init__(self, code: str, message: str, details: list[dict[str, Any]] | None = None):
        assert code in CODES, code
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or []

    @property
    def fields(self) -> list[str]:
        return [d["field"] for d in self.details if d.get("field")]

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


def invalid_from_validation(error: ValidationError) -> ChronicleError:
    details = [
        {
            "field": ".".join(str(part) for part in e["loc"]) or "payload",
            "rule": e["type"],
            "message": e["msg"],
        }
        for e in error.errors(include_input=False, include_url=False)
    ]
    fields = ", ".join(d["field"] for d in details)
    return ChronicleError("invalid", f"invalid request: {fields}", details)


def translate(error: BaseException) -> ChronicleError:
    """Map library, driver and domain errors to a ChronicleError without leaking internals."""
    if isinstance(error, ChronicleError):
        return error
    if isinstance(error, ValidationError):
        return invalid_from_validation(error)
    if isinstance(error, DomainError):
        details = (
            [{"field": error.field, "rule": error.rule, "message": error.message, **error.context}]
            if error.field
            else []
        )
        return ChronicleError(error.code, error.message, details)
    if isinstance(error, (OperationalError, psycopg.OperationalError, psycopg.InterfaceError, TimeoutError)):
        return ChronicleError("unavailable", "the database is unavailable; retry later")
    if isinstance(error, (PersistenceError, psycopg.Error)):
        log.error("database error", extra={"error_type": type(error).__name__})
        return ChronicleError("unavailable", "the database refused the operation; retry later")
    log.exception("unexpected error", exc_info=error)
    return ChronicleError("internal", "internal error")
