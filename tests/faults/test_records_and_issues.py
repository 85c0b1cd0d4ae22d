"""A run's record is always written and its issue always left in the right status: odd text from the agent,
hostile issue files, a Ctrl-C in the middle of a git step."""

from __future__ import annotations

import json

from beflow.trackers import Status
from tests.faults.conftest import beflow_run, secrets_in_history
from tests.support.projects import AutoProject


def test_a_lone_surrogate_in_the_agents_message_is_recorded_and_the_issue_moves_on(
    auto_project: AutoProject, nothing_left: None
) -> None:
    key = auto_project.new_issue("write hello.txt hi\\n", "say odd \\ud800 text")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 0, done.stderr
    record = auto_project.only_record()  # before: saving the record crashed after the commit; it stayed `running`
    assert record.outcome == "succeeded" and record.final_message == "odd \ufffd text"
    json.loads((auto_project.run_dir(record) / "run.json").read_text(encoding="utf-8"))
    issue = auto_project.issue(key)
    assert issue.status == Status.REVIEW and "odd \ufffd text" in issue.comments[-1].text
    assert "beflow/1" in auto_project.branches()
    assert secrets_in_history(auto_project.directory) == []
    # The next run does not run it again.
    assert beflow_run(auto_project, "--auto").code == 0
    assert len(auto_project.records()) == 1
