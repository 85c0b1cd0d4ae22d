"""Keeping secret values out of everything a run writes down: the injected MCP servers' and every secret beflow
holds itself (the tracker's token: :func:`beflow.agent.agent_env.held_secrets`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from beflow.mcp.acp import MASK, AcpServer, secret_values

#: Secret values shorter than this are masked only where they are known to be secrets (``mcpServers``), not in
#: free text: masking every "1" or "on" in a transcript would make it unreadable.
MIN_SCRUBBED = 6

#: The words that start an ``Authorization`` header's value (``Bearer <token>``): the token after one is a secret
#: of its own, masked when it is said bare too.
AUTH_SCHEMES = frozenset(
    {"bearer", "basic", "token", "digest", "bot", "key", "apikey", "api-key", "ssws", "dpop", "hawk", "negotiate"}
)
_SCHEMED = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s+(\S+)\s*")


def with_bare_tokens(values: Iterable[str]) -> set[str]:
    """``values`` and, for each that is a scheme word and a token (``Bearer abc…``), the token alone."""
    found = set(values)
    for value in list(found):
        match = _SCHEMED.fullmatch(value)
        if match and match[1].lower() in AUTH_SCHEMES:
            found.add(match[2])
    return found


class Redactor:
    """Masks the secret values of the injected MCP servers (env and header values), and ``secrets`` (the ones beflow
    holds: the tracker's token), in what goes into a run record.

    acpx's ``--format json`` stream repeats ``session/new`` with the ``mcpServers`` it handed over, values and all;
    an agent or a hook may also print a value. Every env and header value is masked inside ``mcpServers``, and
    any value of :data:`MIN_SCRUBBED` characters or more wherever else it appears (raw or JSON-escaped). The token
    of a value such as ``Bearer <token>`` is masked on its own as well (:func:`with_bare_tokens`).
    """

    def __init__(
        self, servers: Sequence[AcpServer] | None = None, *, words: bool = False, secrets: Iterable[str] = ()
    ) -> None:
        values = with_bare_tokens(secret_values(servers or []) | {s for s in secrets if s})
        scrubbed = sorted((v for v in values if len(v) >= MIN_SCRUBBED), key=len, reverse=True)
        self._forms = [form for v in scrubbed for form in {v.encode(), json.dumps(v)[1:-1].encode()}]
        self._pattern: re.Pattern[bytes] | None = None
        # With ``words``, shorter values too, wherever one stands as a word of its own (``TOKEN=ab1`` but not the
        # "ab1" inside "lab1"): for output that may print the injected file or the environment, such as a hook's.
        short = sorted((v for v in values if 0 < len(v) < MIN_SCRUBBED), key=len, reverse=True) if words else []
        self._words = [
            re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(form) + rb"(?![A-Za-z0-9_])")
            for v in short
            for form in {v.encode(), json.dumps(v)[1:-1].encode()}
        ]

    def needles(self) -> list[bytes]:
        """The secret values (raw and JSON-escaped) this redactor masks."""
        return list(self._forms)

    def __call__(self, data: bytes) -> bytes:
        """``data`` masked: one line of output, or many joined by newlines (each line a JSON-RPC message or not)."""
        if b'"mcpServers"' in data:
            data = b"\n".join(_mask_servers(line) if b'"mcpServers"' in line else line for line in data.split(b"\n"))
        if len(self._forms) <= FEW_SECRETS:
            for form in self._forms:
                data = data.replace(form, MASK.encode())
        else:  # many secrets (a big .mcp.json): one pass over the data, not one per secret
            if self._pattern is None:
                self._pattern = _alternation(self._forms)
            data = self._pattern.sub(MASK.encode(), data)
        for word in self._words:
            data = word.sub(MASK.encode(), data)
        return data

    def text(self, text: str) -> str:
        return self(text.encode("utf-8")).decode("utf-8", errors="replace")


#: Up to this many secret forms, masking replaces each in turn; beyond, one regular expression finds them all.
FEW_SECRETS = 32


def _alternation(forms: list[bytes]) -> re.Pattern[bytes]:
    """One pattern matching every form (the longest where several start at the same place), as a trie: shared
    prefixes are matched once, so a search costs about one step per byte of data however many forms there are."""
    trie: dict[int | None, Any] = {}
    for form in forms:
        node = trie
        for byte in form:
            node = node.setdefault(byte, {})
        node[None] = {}

    def pattern(node: dict[int | None, Any]) -> bytes:
        # Iterative along single-child chains, recursive only where the trie branches (shallow).
        literal = b""
        while len(node) == 1 and None not in node:
            byte, node = next(iter(node.items()))
            assert byte is not None  # the loop's condition
            literal += re.escape(bytes([byte]))
        branches = [
            re.escape(bytes([b])) + pattern(child)
            for b, child in sorted((k, v) for k, v in node.items() if k is not None)
        ]
        if not branches:
            return literal
        group = b"(?:" + b"|".join(branches) + b")"
        return literal + (group + b"?" if None in node else group)

    return re.compile(pattern(trie))


def _mask_servers(line: bytes) -> bytes:
    """The JSON-RPC message with every env and header value under ``params.mcpServers`` masked."""
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return line
    params = message.get("params") if isinstance(message, dict) else None
    servers = params.get("mcpServers") if isinstance(params, dict) else None
    if not isinstance(servers, list):
        return line
    for server in servers:
        for name in ("env", "headers"):
            for pair in server.get(name) or [] if isinstance(server, dict) else []:
                if isinstance(pair, dict) and "value" in pair:
                    pair["value"] = MASK
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
