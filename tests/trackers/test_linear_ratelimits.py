"""Linear's rate limits against the fake Linear: a ``RATELIMITED`` answer, in Linear's shape (a GraphQL error under
400) or a proxy's (429, a page or GraphQL), closes the client's gate until the reset the answer gives; nothing is sent
meanwhile; a short one is waited out in line; and nothing is lost or doubled by it: a refused request was never
carried out, so a comment is posted once and a claim is made once, by one watcher."""

from __future__ import annotations

import time
from typing import Any

import pytest

from beflow.trackers.linear_api import RateLimited
from beflow.trackers.linear_claims import lease_of
from tests.support.linear import FakeLinear
from tests.support.linear import linear as linear
from tests.trackers.test_linear_claims import claims_of, make

#: A reset this far back makes the client's gate end at most a tenth of a second from now: the gate adds a second
#: of slack, and up to one more for Linear's clock (its ``Date`` says whole seconds). A short limit, waited out in
#: line without slowing the test.
JUST_PAST = -1.9


def test_ratelimited_in_linears_shape_closes_the_gate_until_the_reset_it_gives(linear: FakeLinear) -> None:
    watcher = make(linear)
    linear.add_issue("Work", labels=["beflow"])
    linear.rate_limit(reset_in=3600)
    before = time.time()
    with pytest.raises(RateLimited) as caught:
        watcher.ready()
    assert before + 3600 <= caught.value.until <= time.time() + 3602  # (the reset, and a second of slack)
    assert caught.value.fix is not None and "watch` waits by itself" in caught.value.fix
    sent = len(linear.seen)
    for ask in (watcher.ready, lambda: watcher.get("ENG-1")):
        with pytest.raises(RateLimited):
            ask()
    assert len(linear.seen) == sent and watcher.api.stats.rate_limited == 1  # the gate held: nothing was sent


@pytest.mark.parametrize("graphql", [True, False], ids=["graphql", "page"])
def test_a_429_is_a_rate_limit_too_and_its_retry_after_is_heeded(linear: FakeLinear, graphql: bool) -> None:
    watcher = make(linear)
    linear.rate_limit(reset_in=None, status=429, retry_after=120, graphql=graphql)
    before = time.time()
    with pytest.raises(RateLimited) as caught:
        watcher.ready()
    assert before + 120 <= caught.value.until <= time.time() + 122


def test_a_short_limit_is_waited_out_in_line_and_the_comment_posted_once(linear: FakeLinear) -> None:
    watcher = make(linear)
    issue = linear.add_issue("Work", labels=["beflow"])
    linear.rate_limit(reset_in=JUST_PAST, field="commentCreate")
    watcher.comment("ENG-1", "A note", "ada")
    assert [c["body"] for c in issue["comments"]] == ["A note"]
    creates = linear.requests("commentCreate")
    assert [s.codes for s in creates] == [["RATELIMITED"], []] and watcher.api.stats.rate_limited == 1


def test_a_claim_refused_as_rate_limited_is_no_claim_and_the_next_is_the_only_one(linear: FakeLinear) -> None:
    issue = linear.add_issue("Claim me", labels=["beflow"])
    limited, other = make(linear), make(linear)
    linear.rate_limit(reset_in=3600, field="commentCreate")
    with pytest.raises(RateLimited):
        limited.claim("ENG-1", "limited")
    assert claims_of(issue) == []  # refused before it was carried out: nothing to settle
    claim = other.claim("ENG-1", "other")  # (another watcher, whose gate is open)
    [made] = claims_of(issue)
    lease = lease_of(made["body"])
    assert lease is not None and (lease.generation, lease.owner) == (1, "other")
    with pytest.raises(RateLimited):
        limited.claim("ENG-1", "limited")  # its gate still closed: not a request, and not a second claim
    assert len(claims_of(issue)) == 1
    claim.release()


def test_a_claim_whose_answer_was_lost_and_whose_retry_was_rate_limited_is_settled_as_its_own(
    linear: FakeLinear,
) -> None:
    """The create is made and its answer lost (a proxy's 502); its retry is rate limited, waited out, and refused
    (the id is taken): the comment's nonce says the claim is this watcher's, and there is one claim comment."""
    issue: dict[str, Any] = linear.add_issue("Claim me", labels=["beflow"])
    watcher = make(linear)
    linear.fail(502, field="commentCreate", after=True)
    linear.rate_limit(reset_in=JUST_PAST, field="commentCreate")
    claim = watcher.claim("ENG-1", "watcher")
    assert claim.seconds_left() is not None and len(claims_of(issue)) == 1
    codes = [s.codes for s in linear.requests("commentCreate")]
    assert codes[:2] == [[], ["RATELIMITED"]] and len(codes) == 3  # made (answer lost), limited, refused
    claim.release()
