"""Encryption of what a fleet stores in Temporal (``engine.encryption_key_env``).

What crosses Temporal carries keys, ids, outcomes and names, never a secret (:mod:`beflow.fleet.shapes`); still,
a team may not want even those readable by whoever reads the service's database (Temporal Cloud, a shared
cluster). With a key set, every payload — workflow inputs and results, activity inputs, results and heartbeats,
signals, queries — is sealed with AES-256-GCM before it leaves the process and opened after it arrives; the
service keeps only ciphertext. Every dispatcher and worker of the fleet needs the same key. Workflow ids, task
queues and event types are the service's own and stay readable.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from beflow.config import TemporalEngineSettings
from beflow.errors import BeflowError, ConfigError

if TYPE_CHECKING:
    from temporalio.api.common.v1 import Payload
    from temporalio.converter import DataConverter

#: The metadata a sealed payload carries: its encoding, and which key sealed it (a digest, not the key).
ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
#: How to make a key (32 random bytes, base64).
MAKE_A_KEY = "python3 -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())'"


def key_of(settings: TemporalEngineSettings) -> bytes | None:
    """The key ``engine.encryption_key_env`` names (None: no encryption); a :class:`ConfigError` naming the
    setting when the variable is unset or holds no 32-byte key."""
    name = settings.encryption_key_env
    if name is None:
        return None
    value = os.environ.get(name, "").strip()
    if not value:
        raise ConfigError(
            f"engine.encryption_key_env: ${name} is not set",
            fix=f"Export {name} with the fleet's key (the same on every machine); make one with: {MAKE_A_KEY}",
        )
    try:  # (standard or URL-safe base64)
        key = base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise ConfigError(
            f"engine.encryption_key_env: ${name} does not hold a key (32 bytes, base64)",
            fix=f"Make one with: {MAKE_A_KEY}",
        )
    return key


class SealingFailed(BeflowError):
    """A payload sealed with another key, or altered: it cannot be opened."""


def data_converter(key: bytes) -> DataConverter:
    """Temporal's default data converter, with every payload sealed with ``key``."""
    import dataclasses

    from temporalio.converter import PayloadCodec, default

    class Sealing(PayloadCodec):
        def __init__(self) -> None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aead = AESGCM(key)
            self._id = hashlib.sha256(b"beflow fleet key\0" + key).hexdigest()[:16].encode()

        async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
            from temporalio.api.common.v1 import Payload

            sealed: list[Payload] = []
            for payload in payloads:
                nonce = os.urandom(12)
                data = nonce + self._aead.encrypt(nonce, payload.SerializeToString(), None)
                sealed.append(Payload(metadata={"encoding": ENCODING, KEY_ID: self._id}, data=data))
            return sealed

        async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
            from cryptography.exceptions import InvalidTag
            from temporalio.api.common.v1 import Payload

            opened: list[Payload] = []
            for payload in payloads:
                if payload.metadata.get("encoding") != ENCODING:
                    opened.append(payload)  # stored before the fleet had a key: readable as it is
                    continue
                if payload.metadata.get(KEY_ID) != self._id:
                    raise SealingFailed(
                        "a payload in Temporal was sealed with another key than engine.encryption_key_env's",
                        fix="Give every dispatcher and worker of the fleet the same key.",
                    )
                data = bytes(payload.data)
                try:
                    plain = self._aead.decrypt(data[:12], data[12:], None)
                except InvalidTag:
                    raise SealingFailed("a payload in Temporal was altered: it does not open") from None
                opened.append(Payload.FromString(plain))
            return opened

    return dataclasses.replace(default(), payload_codec=Sealing())
