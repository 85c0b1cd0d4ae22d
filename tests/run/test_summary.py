"""The comment a finished run leaves on its issue."""

from __future__ import annotations

from beflow.records.record import RunRecord, new_run_id, now
from beflow.run.summary import FINAL_MESSAGE_SHOWN, summary


def test_a_huge_final_message_is_quoted_short_enough_for_github() -> None:
    record = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="codex", started_at=now())
    record.close("succeeded", "done")
    record.final_message = "x" * 300_000
    text = summary(record)
    assert len(text) < FINAL_MESSAGE_SHOWN + 1000 < 65_536
    assert f"beflow runs show {record.id}" in text


def test_the_words_the_agent_chose_are_made_inert_for_where_the_comment_goes() -> None:
    from beflow.trackers import gitlab_quoting
    from tests.support.gitlab_markdown import acted_on

    record = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="codex", started_at=now())
    record.close("failed", "the agent said !3 ~bug %v1 &7 #4 @owner")

    on_github = summary(record)
    on_gitlab = summary(record, inert=gitlab_quoting.inert)

    assert acted_on(on_gitlab) == []
    assert acted_on(on_github) != []  # GitHub's quoting leaves GitLab's own references as they are
