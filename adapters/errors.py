"""The one place that turns any failure (library, driver, domain) into a ChronicleError
without leaking internals."""

from __future__ import annotations

import logging

import psycopg
from eventsourcing.persistence import OperationalError, PersistenceError
from pydantic import ValidationError

from domain.errors import DomainError
from services.contract.errors import ChronicleError, invalid_from_validation

log = logging.getLogger(__name__)


# Failures of the statement's values, not of the database: a retry fails the same way.
STATEMENT_FAILURES = (psycopg.errors.DataError, psycopg.errors.ProgramLimitExceeded)


def statement_failed(error: BaseException) -> bool:
    """Whether a value in the statement failed it (too long for an index, not encodable),
    looking through the library's wrapping to the driver's error."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, STATEMENT_FAILURES):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


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
