"""ChronicleClient, the typed async client of the wire contract; imports no database driver."""

from chronicle_contract.errors import ChronicleError

from chronicle_client.connection import ChronicleClient

__all__ = ["ChronicleClient", "ChronicleError"]
