"""``Batched``: a blocking read many threads ask for at once is made once for those who asked while the one
before it ran, and nobody gets a reading that began before they asked."""

from __future__ import annotations

import threading

import pytest

from beflow.system.threads import Batched
from tests.support.waiting import eventually


def test_askers_during_a_reading_share_the_next_one_and_none_gets_one_older_than_its_question() -> None:
    gates = [threading.Event(), threading.Event()]
    began: list[int] = []

    def read() -> int:
        began.append(len(began) + 1)
        gates[len(began) - 1].wait(30)
        return len(began)

    batched = Batched(read)
    got: dict[str, int] = {}
    first = threading.Thread(target=lambda: got.__setitem__("first", batched()))
    first.start()
    eventually(lambda: began == [1], "the first reading began")
    # Four more ask while it runs (the writes they come after are not in it): they wait for the next one.
    later = [threading.Thread(target=lambda n=n: got.__setitem__(f"later{n}", batched())) for n in range(4)]
    for thread in later:
        thread.start()
    eventually(lambda: batched.waiting == 4, "the later askers waited")
    gates[0].set()
    eventually(lambda: began == [1, 2], "one more reading began, for all four")
    gates[1].set()
    for thread in [first, *later]:
        thread.join(30)
    assert got == {"first": 1, "later0": 2, "later1": 2, "later2": 2, "later3": 2}
    assert began == [1, 2]
    # Asked again once nothing runs: a reading of its own, begun after it asked.
    gates.append(threading.Event())
    gates[2].set()
    assert batched() == 3


def test_a_readings_error_is_raised_to_every_asker_and_the_next_reading_runs_again() -> None:
    calls: list[int] = []

    def read() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the records could not be read")
        return "fine"

    batched = Batched(read)
    with pytest.raises(OSError, match="could not be read"):
        batched()
    assert batched() == "fine" and len(calls) == 2
