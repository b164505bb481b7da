"""Maps pydantic domain events to stored events and back: orjson, and each owner's content
sealed with their key (AES-256-GCM) so destroying the key erases it."""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Collection
from typing import Any, cast
from uuid import UUID

import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic, register_topic, resolve_topic

from adapters.randomness import random_bytes
from domain.base import DomainEvent
from domain.optimization import OptimizationBegun, OptimizationEnded
from services.ports.event_store import ErasedContent, EventMapper
from services.ports.keys import KeyRing

# Events renamed in code that keep the name they are stored under (their TOPIC): registered
# here, so that every process reading the log resolves that name (resolve_topic would look
# for a class of that name in the module) before it has written such an event itself.
for renamed in (OptimizationBegun, OptimizationEnded):
    register_topic(renamed.TOPIC, renamed)


class OrjsonTranscoder(Transcoder):
    def encode(self, obj: Any) -> bytes:
        return orjson.dumps(obj)

    def decode(self, data: bytes) -> Any:
        return orjson.loads(data)


MAX_CIPHERS = 10_000
OWNER_FIELD = "_owner"
SEALED_FIELD = "_sealed"
CLASS_VERSION = "class_version"  # as the library names it: stored only when above 1


def stays_clear(field: str) -> bool:
    """Metadata an audit keeps after erasure: ids, timestamps, types, the owner."""
    return field in ("timestamp", "originator_topic", "owner", CLASS_VERSION) or field.endswith("_id")


@functools.cache
def clear_fields(event_class: type[DomainEvent]) -> frozenset[str]:
    """The fields of an event class that stay clear, worked out once per class: asking
    `stays_clear` of each field of each event was ~9 of the ~30 µs that sealing one
    message took on the writer thread."""
    return frozenset(name for name in event_class.model_fields if stays_clear(name)) | {CLASS_VERSION}


def associated_data(originator_id: UUID, version: int) -> bytes:
    # Binds a sealed content to its event: it cannot be moved onto another one.
    return originator_id.bytes + version.to_bytes(8, "big")


def reply_data(owner: str, key: str) -> bytes:
    # Binds a sealed reply to its record: it cannot be moved under another key or owner.
    return b"reply\0" + owner.encode() + b"\0" + key.encode()


class PydanticMapper(Mapper[UUID], EventMapper):
    """Maps pydantic domain events to stored events and back.

    With a KeyRing, an event written for an owner keeps its metadata clear (`stays_clear`)
    and seals everything else with the owner's AES-256-GCM key: stored state is
    `{clear fields..., "_owner": owner, "_sealed": base64(nonce || ciphertext)}`. Reading
    it after the key was destroyed raises ErasedContent. States without `_sealed` (written
    without a key ring) read as they are.
    """

    def __init__(self, transcoder: Transcoder | None = None, keys: KeyRing | None = None, **kwargs: Any):
        super().__init__(transcoder=transcoder or OrjsonTranscoder(), **kwargs)
        self.keys = keys
        self._ciphers: dict[bytes, AESGCM] = {}

    def to_stored_event(self, domain_event: Any, owner: str | None = None) -> StoredEvent:
        state = domain_event.model_dump(exclude={"originator_id", "originator_version"})
        class_version = getattr(type(domain_event), CLASS_VERSION, 1)
        if class_version > 1:
            state[CLASS_VERSION] = class_version
        if self.keys is not None and owner is not None:
            event_class: type[DomainEvent] = type(domain_event)
            state = self._sealed(
                state, owner, domain_event.originator_id, domain_event.originator_version, clear_fields(event_class)
            )
        stored_state = self.transcoder.encode(state)
        if self.compressor:
            stored_state = self.compressor.compress(stored_state)
        if self.cipher:
            stored_state = self.cipher.encrypt(stored_state)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=get_topic(type(domain_event)),
            state=stored_state,
        )

    def _sealed(
        self, state: dict[str, Any], owner: str, originator_id: UUID, version: int, clear: Collection[str] | None = None
    ) -> dict[str, Any]:
        """`state` as stored for its owner: the clear fields (`clear`, else each asked of
        `stays_clear`) in their order, then the owner and the rest sealed."""
        if clear is None:
            clear = {k for k in state if stays_clear(k)}
        kept: dict[str, Any] = {}
        content: dict[str, Any] = {}
        for name, value in state.items():
            (kept if name in clear else content)[name] = value
        kept[OWNER_FIELD] = owner
        kept[SEALED_FIELD] = self.seal(orjson.dumps(content), owner, associated_data(originator_id, version))
        return kept

    def seal(self, content: bytes, owner: str, aad: bytes) -> str:
        """`content` sealed with the owner's key (UserErased once erased): base64(nonce || ciphertext)."""
        key = self.keys.key_for_writing(owner)  # type: ignore[union-attr]
        nonce = random_bytes(12)  # (not a system call per event: adapters/randomness.py)
        return base64.b64encode(nonce + self._cipher(key).encrypt(nonce, content, aad)).decode()

    def unseal(self, sealed: str, owner: str, aad: bytes, originator_id: UUID, version: int) -> bytes:
        """What `seal` sealed; ErasedContent when the owner's key is gone, InvalidTag when
        the content or its associated data was changed."""
        key = self.keys.key_for_reading(owner) if self.keys is not None else None
        if key is None:
            raise ErasedContent(originator_id, version, owner)
        raw = binascii.a2b_base64(sealed)  # base64.b64decode without its Python wrapper: once per event read
        return self._cipher(key).decrypt(raw[:12], raw[12:], aad)

    def seal_reply(self, owner: str | None, key: str, fingerprint: str, reply: dict[str, Any]) -> bytes:
        """A command's reply as its idempotency record stores it: with a key ring, sealed
        with the owner's key (bound to the owner and the Idempotency-Key; UserErased once
        erased), its request fingerprint inside, so a backup of the table quotes nothing
        once the key is gone. The system's own replies (owner None) stay clear."""
        content = orjson.dumps({"fingerprint": fingerprint, "reply": reply})
        if self.keys is None or owner is None:
            return content
        return orjson.dumps({OWNER_FIELD: owner, SEALED_FIELD: self.seal(content, owner, reply_data(owner, key))})

    def open_reply(self, owner: str, key: str, stored: bytes) -> tuple[str, dict[str, Any]]:
        """(request fingerprint, reply) of a stored idempotency record; ErasedContent when
        the owner's key is gone. Records from before sealing hold the bare reply."""
        data = orjson.loads(stored)
        sealed = data.get(SEALED_FIELD)
        if sealed is not None:
            key_bytes = self.keys.key_for_reading(owner) if self.keys is not None else None
            if key_bytes is None:
                raise ErasedContent(UUID(int=0), 0, owner)
            raw = binascii.a2b_base64(sealed)
            data = orjson.loads(self._cipher(key_bytes).decrypt(raw[:12], raw[12:], reply_data(owner, key)))
        if "fingerprint" in data and "reply" in data and len(data) == 2:
            return data["fingerprint"], data["reply"]
        return "", data  # (fingerprint in its own column then)

    def _cipher(self, key: bytes) -> AESGCM:
        # Setting up a cipher costs more than sealing one event with it: one per key.
        cipher = self._ciphers.get(key)
        if cipher is None:
            if len(self._ciphers) >= MAX_CIPHERS:
                self._ciphers.clear()
            cipher = self._ciphers[key] = AESGCM(key)
        return cipher

    def envelope(self, stored_event: StoredEvent) -> dict[str, Any]:
        """The stored state as JSON, content still sealed (what survives an erasure)."""
        return self.stored_json(stored_event.state)

    def stored_json(self, state: bytes) -> dict[str, Any]:
        """A stored state's JSON, its content still sealed."""
        if self.cipher:
            state = self.cipher.decrypt(state)
        if self.compressor:
            state = self.compressor.decompress(state)
        return self.transcoder.decode(state)

    def take_content(self, data: dict[str, Any], originator_id: UUID, version: int) -> bytes | None:
        """Takes the sealed content out of a stored state's JSON (`data` keeps its clear
        fields) and returns it unsealed, as the JSON object it was sealed as; None when
        nothing was sealed. ErasedContent when the owner's key is gone."""
        sealed = data.pop(SEALED_FIELD, None)
        if sealed is None:
            return None
        owner = data.pop(OWNER_FIELD)
        return self.unseal(sealed, owner, associated_data(originator_id, version), originator_id, version)

    def decoded_state(self, stored_event: StoredEvent) -> dict[str, Any]:
        """The event's fields as stored JSON values (content unsealed), without building
        the event."""
        data = self.stored_json(stored_event.state)
        # (the library types a stored id as UUID | str; ours are always UUIDs)
        content = self.take_content(data, cast(UUID, stored_event.originator_id), stored_event.originator_version)
        if content is not None:
            data.update(orjson.loads(content))
        return data

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        event_class: type[DomainEvent] = resolve_topic(stored_event.topic)
        data = self.decoded_state(stored_event)
        upcast(event_class, data)
        data["originator_id"] = stored_event.originator_id
        data["originator_version"] = stored_event.originator_version
        return event_class.model_validate(data)


def upcast(event_class: type, state: dict[str, Any]) -> None:
    """Brings a stored event's fields up to its class's current shape, in place, by the
    library's convention: an event class at `class_version` N has `upcast_v1_v2` ...
    `upcast_v{N-1}_vN`, and a stored state older than N is passed through each in turn.
    The stored event itself is never rewritten."""
    from_version = state.pop(CLASS_VERSION, 1)
    while from_version < getattr(event_class, CLASS_VERSION, 1):
        getattr(event_class, f"upcast_v{from_version}_v{from_version + 1}")(state)
        from_version += 1
