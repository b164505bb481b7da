"""ChronicleClient, the typed async client of the wire contract; imports no database driver."""

from services.client.connection import ChronicleClient
from services.contract.errors import ChronicleError

__all__ = ["ChronicleClient", "ChronicleError"]
