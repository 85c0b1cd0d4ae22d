"""The demo ACP agent: a small, honest stand-in for a coding agent, driven by acpx over stdio.

It speaks the Agent Client Protocol (JSON-RPC 2.0, one message a line): ``initialize``, ``session/new``,
``session/prompt`` and the ``session/cancel`` notification. On a prompt it reads ``greet.py`` in the session's
working directory, asks permission to edit it (``session/request_permission``; unattended runs approve it),
adds a ``farewell`` function and a test, and reports which MCP servers it was handed in ``session/new``. It needs
no account and no network, so ``beflow demo`` shows the whole product on any machine.

Run: ``python -m beflow.demo.agent`` (acpx starts it through ``--agent``).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

FAREWELL = '''

def farewell(name: str) -> str:
    """Say goodbye to ``name``."""
    return f"Goodbye, {name}!"
'''

TEST = """from greet import farewell, greet


def test_greet() -> None:
    assert greet("Ada") == "Hello, Ada!"


def test_farewell() -> None:
    assert farewell("Ada") == "Goodbye, Ada!"
"""


class DemoAgent:
    def __init__(self) -> None:
        self.sessions: dict[str, dict[str, Any]] = {}
        self.pending: dict[int, Any] = {}
        self.next_id = 1000
        self.lock = threading.Lock()
        self.cancelled = threading.Event()

    # -- the wire ------------------------------------------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        with self.lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def update(self, session_id: str, update: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": update}})

    def say(self, session_id: str, text: str) -> None:
        self.update(session_id, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})

    def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A request to the client (acpx); waits for its answer."""
        answered = threading.Event()
        with self.lock:
            self.next_id += 1
            request_id = self.next_id
        self.pending[request_id] = answered
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        answered.wait()
        return self.pending.pop(request_id)  # type: ignore[no-any-return]

    def serve(self) -> None:
        for line in sys.stdin:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "method" not in message and message.get("id") in self.pending:
                event = self.pending[message["id"]]
                self.pending[message["id"]] = message.get("result") or {"error": message.get("error")}
                event.set()
                continue
            method, params = message.get("method"), message.get("params") or {}
            if method == "session/cancel":
                self.cancelled.set()
            elif method == "session/prompt":
                threading.Thread(target=self.prompt, args=(message["id"], params), daemon=True).start()
            elif "id" in message:
                self.answer(message["id"], method, params)

    def answer(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": False, "mcpCapabilities": {"http": True, "sse": True}},
                "agentInfo": {"name": "beflow-demo-agent", "version": "1.0.0"},
                "authMethods": [],
            }
        elif method == "session/new":
            session_id = f"demo-{len(self.sessions) + 1}"
            self.sessions[session_id] = {"cwd": params.get("cwd", "."), "mcp": params.get("mcpServers", [])}
            result = {"sessionId": session_id}
        elif method == "authenticate":
            result = {}
        else:
            self.send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no {method}"}})
            return
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    # -- the work ------------------------------------------------------------------------------------------------

    def prompt(self, request_id: Any, params: dict[str, Any]) -> None:
        session_id = params["sessionId"]
        session = self.sessions[session_id]
        cwd = Path(session["cwd"])
        names = [server.get("name", "?") for server in session["mcp"]]
        self.say(session_id, f"MCP servers I was given: {', '.join(names) or 'none'}.\n")
        target = cwd / "greet.py"
        self.update(session_id, tool_call("read-1", "Read greet.py", "read", "completed", target))
        if self.cancelled.is_set():
            self.send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "cancelled"}})
            return
        if not target.exists():
            self.say(session_id, "There is no greet.py here, so there is nothing for me to change.\n")
            self.send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})
            return
        edit = tool_call("edit-1", "Add farewell() to greet.py and a test", "edit", "pending", target)
        self.update(session_id, edit)
        answer = self.ask(
            "session/request_permission",
            {
                "sessionId": session_id,
                # ACP's ToolCallUpdate: the tool call's own fields, without the notification's kind.
                "toolCall": {k: v for k, v in edit.items() if k != "sessionUpdate"},
                "options": [
                    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                ],
            },
        )
        outcome = answer.get("outcome") or {}
        if outcome.get("outcome") != "selected" or outcome.get("optionId") != "allow":
            self.update(session_id, {"sessionUpdate": "tool_call_update", "toolCallId": "edit-1", "status": "failed"})
            self.say(session_id, "I was not allowed to edit greet.py, so I changed nothing.\n")
        else:
            source = target.read_text(encoding="utf-8")
            if "def farewell" not in source:
                target.write_text(source.rstrip("\n") + "\n" + FAREWELL, encoding="utf-8")
            (cwd / "test_greet.py").write_text(TEST, encoding="utf-8")
            self.update(
                session_id, {"sessionUpdate": "tool_call_update", "toolCallId": "edit-1", "status": "completed"}
            )
            self.say(session_id, "Added farewell(name) to greet.py, with a test in test_greet.py.\n")
        self.send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})


def tool_call(call_id: str, title: str, kind: str, status: str, path: Path) -> dict[str, Any]:
    return {
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": title,
        "kind": kind,
        "status": status,
        "locations": [{"path": str(path)}],
    }


def main() -> None:
    DemoAgent().serve()


if __name__ == "__main__":
    main()
