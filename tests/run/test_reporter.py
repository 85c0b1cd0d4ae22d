"""A run's progress reporter: the caller never waits, only the latest text is sent, and closing stops it."""

from __future__ import annotations

import threading
import time

from beflow.run.reporter import ProgressReporter


def test_reports_never_wait_and_only_the_latest_is_sent_after_a_slow_send() -> None:
    sent: list[str] = []
    first_arrived, release = threading.Event(), threading.Event()

    def send(text: str) -> None:
        sent.append(text)
        first_arrived.set()
        release.wait(10)

    reporter = ProgressReporter(send)
    reporter.report("first")
    assert first_arrived.wait(10)
    started = time.monotonic()
    for n in range(1000):  # while the tracker holds the first: none of these waits, none piles up
        reporter.report(f"text {n}")
    assert time.monotonic() - started < 0.5
    release.set()
    deadline = time.monotonic() + 10
    while sent[-1] != "text 999" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sent == ["first", "text 999"]
    reporter.close()
    reporter.report("after the end")
    assert sent == ["first", "text 999"]


def test_closing_drops_what_was_not_sent_and_waits_only_so_long_for_a_send_on_its_way() -> None:
    arrived, release = threading.Event(), threading.Event()
    sent: list[str] = []

    def send(text: str) -> None:
        sent.append(text)
        arrived.set()
        release.wait(10)

    reporter = ProgressReporter(send)
    reporter.report("held")
    assert arrived.wait(10)
    reporter.report("pending")
    started = time.monotonic()
    reporter.close(timeout=0.2)
    assert 0.15 < time.monotonic() - started < 2
    release.set()
    assert sent == ["held"]


def test_a_failing_send_never_reaches_the_caller() -> None:
    calls: list[str] = []
    done = threading.Event()

    def send(text: str) -> None:
        calls.append(text)
        if len(calls) == 2:
            done.set()
        raise RuntimeError("GitHub is down")

    reporter = ProgressReporter(send)
    reporter.report("one")
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    reporter.report("two")
    assert done.wait(10)
    reporter.close()
