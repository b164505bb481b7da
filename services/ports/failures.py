"""The failure translation port: what any failure (a driver's, the library's, the domain's) means
as Chronicle's error. Only the adapter that knows the drivers can say (adapters/errors.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from chronicle_contract.errors import ChronicleError


class Failures(ABC):
    @abstractmethod
    def translate(self, error: BaseException) -> ChronicleError:
        """The error as a ChronicleError, without leaking internals."""

    @abstractmethod
    def statement_failed(self, error: BaseException) -> bool:
        """Whether a statement's own values failed it (a value too long for an index, content
        sealed for an erased user), not the database: saved alone, the others would not fail."""
