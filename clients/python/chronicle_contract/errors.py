"""Chronicle's error codes and the error every caller sees; adapters/errors.py turns driver errors into it."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

CODES = ("invalid", "unauthorized", "not_found", "conflict", "rate_limited", "unavailable", "internal")


class ChronicleError(Exception):
    """A failure with a wire code; `details` name fields and the rules they broke."""

    def __init__(self, code: str, message: str, details: list[dict[str, Any]] | None = None):
        if code not in CODES:
            raise ValueError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or []
        self.request_id: str | None = None  # the request's id, when a client got this in a reply

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
