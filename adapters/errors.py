"""The one place that turns any failure (library, driver, domain) into a ChronicleError
without leaking internals."""

from __future__ import annotations

import logging

import psycopg
from chronicle_contract.errors import ChronicleError, invalid_from_validation
from eventsourcing.persistence import OperationalError, PersistenceError
from pydantic import ValidationError

from domain.errors import DomainError
from services.ports.event_store import WriterErased
from services.ports.failures import Failures

log = logging.getLogger(__name__)


# What chronicle.begin_append raises for content sealed for a user erased before
# (migration 0007).
WRITER_ERASED = "CH001"


# Failures of the statement's values, not of the database: a retry fails the same way.
STATEMENT_FAILURES = (psycopg.errors.DataError, psycopg.errors.ProgramLimitExceeded, WriterErased)


def causes(error: BaseException) -> list[BaseException]:
    """The error and what caused it, through the library's wrapping to the driver's error."""
    found: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in found:
        found.append(seen)
        seen = seen.__cause__ or seen.__context__
    return found


def statement_failed(error: BaseException) -> bool:
    """Whether the statement's own content failed it (a value too long for an index, not
    encodable, sealed for an erased user): saved alone, the others would not fail."""
    return any(isinstance(cause, STATEMENT_FAILURES) for cause in causes(error))


def sqlstate_of(error: BaseException) -> str | None:
    return next((cause.sqlstate for cause in causes(error) if isinstance(cause, psycopg.Error)), None)


def constraint_of(error: BaseException) -> str | None:
    """The constraint a statement broke (a unique key, say), as Postgres names it."""
    return next((cause.diag.constraint_name for cause in causes(error) if isinstance(cause, psycopg.Error)), None)


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
    if any(isinstance(cause, WriterErased) for cause in causes(error)):
        message = "the user was erased; nothing more is recorded for them"
        return ChronicleError("conflict", message, [{"field": "owner", "rule": "not_erased", "message": message}])
    if statement_failed(error):
        log.warning("a value could not be stored", extra={"error_type": type(error).__name__})
        return ChronicleError("invalid", "the request holds a value the database cannot store")
    if isinstance(error, (OperationalError, psycopg.OperationalError, psycopg.InterfaceError, TimeoutError)):
        return ChronicleError("unavailable", "the database is unavailable; retry later")
    if isinstance(error, (PersistenceError, psycopg.Error)):
        log.error("database error", extra={"error_type": type(error).__name__})
        return ChronicleError("unavailable", "the database refused the operation; retry later")
    log.exception("unexpected error", exc_info=error)
    return ChronicleError("internal", "internal error")


class DriverFailures(Failures):
    """The translation above, as the port the command bus is given."""

    def translate(self, error: BaseException) -> ChronicleError:
        return translate(error)

    def statement_failed(self, error: BaseException) -> bool:
        return statement_failed(error)
