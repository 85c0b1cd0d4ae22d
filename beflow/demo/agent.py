"""The demo ACP agent: a small, honest stand-in for a coding agent, driven by acpx over stdio.

It speaks the Agent Client Protocol (JSON-RPC 2.0, one message a line): ``initialize``, ``session/new``,
``session/prompt`` and the ``session/cancel`` notification. On a prompt it reports which MCP servers it was handed
in ``session/new`` and asks permission for one edit (``session/request_permission``; unattended runs approve it):
in the demo's sample, a ``farewell`` function beside ``greet`` in ``greet.py`` and a test; in any other repository,
``NOTES/issue-<key>.md``, the issue in brief and what the run handed the agent (the same file for the same issue
and repository: no model, no clock). It needs no account and no network, so ``beflow demo`` shows the whole
product on any machine, and any repository can try a run with it (``beflow docs demo``).

Run: ``python -m beflow.demo.agent`` (acpx starts it through ``--agent``).
"""

from __future__ import annotations

import json
import re
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
        greet = cwd / "greet.py"
        self.update(session_id, tool_call("read-1", "Read greet.py", "read", "completed", greet))
        if self.cancelled.is_set():
            self.send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "cancelled"}})
            return
        if greet.exists():
            title, done = (
                "Add farewell() to greet.py and a test",
                "Added farewell(name) to greet.py, with a test in test_greet.py.",
            )
            target = greet
        else:
            issue = Issue.read(prompt_text(params))
            target = cwd / "NOTES" / issue.file_name
            title = f"Write NOTES/{target.name}: the issue in brief"
            done = (
                f"There is no greet.py here (I am beflow's demo agent: no model, no account), so I wrote "
                f"NOTES/{target.name}: the issue in brief and what this run handed me."
            )
        if self.edit(session_id, title, target):
            if target == greet:
                source = greet.read_text(encoding="utf-8")
                if "def farewell" not in source:
                    greet.write_text(source.rstrip("\n") + "\n" + FAREWELL, encoding="utf-8")
                (cwd / "test_greet.py").write_text(TEST, encoding="utf-8")
            else:
                target.parent.mkdir(exist_ok=True)
                target.write_text(issue.notes(cwd, names), encoding="utf-8")
            self.update(
                session_id, {"sessionUpdate": "tool_call_update", "toolCallId": "edit-1", "status": "completed"}
            )
            self.say(session_id, done + "\n")
        self.send({"jsonrpc": "2.0", "id": request_id, "result": {"stopReason": "end_turn"}})

    def edit(self, session_id: str, title: str, target: Path) -> bool:
        """Announce the edit and ask for it; ``False`` (said, and the tool call failed) when it is not allowed."""
        edit = tool_call("edit-1", title, "edit", "pending", target)
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
        if outcome.get("outcome") == "selected" and outcome.get("optionId") == "allow":
            return True
        self.update(session_id, {"sessionUpdate": "tool_call_update", "toolCallId": "edit-1", "status": "failed"})
        self.say(session_id, f"I was not allowed to edit {target.name}, so I changed nothing.\n")
        return False


def prompt_text(params: dict[str, Any]) -> str:
    """The text blocks of an ACP prompt, joined."""
    blocks = params.get("prompt") or []
    return "".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")


class Issue:
    """What the demo agent reads of its issue in beflow's prompt: its key, title and body (the default template's
    "issue KEY of this repository", "# title", then the body up to "## How to work")."""

    def __init__(self, key: str | None, title: str, body: str) -> None:
        self.key, self.title, self.body = key, title, body

    @classmethod
    def read(cls, prompt: str) -> Issue:
        key = re.search(r"\bissue (\S+) of this repository", prompt)
        heading = re.search(r"^# (.+)$", prompt, re.M)
        body = prompt[heading.end() :] if heading else prompt
        body = body.split("\n## How to work", 1)[0].strip()
        return cls(key[1] if key else None, heading[1].strip() if heading else "(no title)", body)

    @property
    def file_name(self) -> str:
        """``issue-<key>.md`` (the key made a file name's part), ``issue.md`` when the prompt named none."""
        cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", self.key or "").strip("-.")
        return f"issue-{cleaned}.md" if cleaned else "issue.md"

    def notes(self, cwd: Path, servers: list[str]) -> str:
        """The file: the issue in brief, and what the run handed the agent. Nothing in it changes between two runs
        of the same issue on the same commit."""
        quoted = "\n".join(f"> {line}".rstrip() for line in self.body.splitlines()[:40]) or "> (no description)"
        listed = sorted(p.name + ("/" if p.is_dir() else "") for p in cwd.iterdir() if p.name not in SKIPPED)
        shown = ", ".join(f"`{name}`" for name in listed[:30]) + (", …" if len(listed) > 30 else "")
        heading = f"Issue {self.key}: {self.title}" if self.key else self.title
        return (
            f"# {heading}\n\n"
            "Notes by beflow's demo agent, which needs no model and no account: it does not solve issues. It writes\n"
            "this file so that a run on this repository goes through every step a real agent's does: the worktree,\n"
            "the MCP servers, the commit to a branch, the record and the comment on the issue.\n\n"
            f"## What the issue says\n\n{quoted}\n\n"
            "## What the run handed the agent\n\n"
            f"- the repository's top level: {shown or 'nothing'}\n"
            f"- MCP servers: {', '.join(servers) or 'none'}\n"
        )


#: What the notes' listing of the top level leaves out: git's own, and what beflow puts there for the run.
SKIPPED = frozenset({".git", ".acpxrc.json", "NOTES"})


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
