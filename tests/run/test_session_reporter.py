"""The run's agent session is told from a thread of its own: activities in order, a tool call still waiting replaced
by the next activity, everything queued sent before the end, and a person's stop signal heard once."""

from __future__ import annotations

import threading

from beflow.run import session_reporter
from beflow.run.session_reporter import SessionReporter
from tests.support.waiting import eventually


class Told:
    """An agent session that notes what it is told; ``gate`` holds the first activity until it is set."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str, bool]] = []
        self.gate = threading.Event()
        self.stop = False
        self.looks = 0

    def thought(self, text: str) -> None:
        self.said.append(("thought", text, False))

    def action(self, action: str, parameter: str, *, ephemeral: bool = False) -> None:
        self.gate.wait(10)
        self.said.append((action, parameter, ephemeral))

    def respond(self, text: str, link: str | None = None) -> None:
        self.said.append(("response", text, False))

    def error(self, text: str) -> None:
        self.said.append(("error", text, False))

    def stop_asked(self) -> bool:
        self.looks += 1
        return self.stop


def test_activities_go_in_order_and_a_waiting_tool_call_is_replaced_by_the_next() -> None:
    told = Told()
    reporter = SessionReporter(told)
    reporter.action("Working", "first call", ephemeral=True)  # (sent at once: it holds the thread at the gate)
    eventually(lambda: reporter._busy, "the first call on its way")
    reporter.action("Working", "second call", ephemeral=True)
    reporter.action("Working", "third call", ephemeral=True)
    reporter.action("Progress", "half way")
    reporter.action("Working", "last call", ephemeral=True)
    told.gate.set()
    reporter.close()
    assert told.said == [
        ("Working", "first call", True),
        ("Progress", "half way", False),  # (the second and third calls, replaced while they waited)
        ("Working", "last call", True),
    ]


def test_a_stop_signal_is_heard_once_while_the_run_lives_and_not_after() -> None:
    told = Told()
    told.gate.set()
    heard: list[str] = []
    reporter = SessionReporter(told, lambda: heard.append("stop"), stop_every=0.01)
    eventually(lambda: told.looks >= 2, "two looks")
    assert heard == []
    told.stop = True
    eventually(lambda: heard == ["stop"], "the stop heard")
    looks = told.looks
    reporter.action("Progress", "stopping")
    reporter.close()
    assert heard == ["stop"] and told.looks == looks  # (nobody listens once it was heard)


def test_asked_to_look_now_every_listening_reporter_asks_its_session_at_once() -> None:
    """A webhook said a session was prompted: the reporters listening ask now, not a minute later; one that does not
    listen for a stop (nobody to tell) is not asked."""
    told, deaf = Told(), Told()
    told.gate.set()
    heard: list[str] = []
    reporter = SessionReporter(told, lambda: heard.append("stop"), stop_every=3600)
    quiet = SessionReporter(deaf, None, stop_every=3600)
    told.stop = True
    assert session_reporter.look_now() == 1
    eventually(lambda: heard == ["stop"], "the stop heard at once")
    assert told.looks == 1 and deaf.looks == 0
    reporter.close()
    quiet.close()
    assert session_reporter.look_now() == 0  # (closed: not listening any more)
