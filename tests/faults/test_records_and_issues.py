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


ALIAS_BOMB = """\
---
key: 9
title: bomb
status: ready
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
---
"""


def test_an_alias_bomb_or_a_huge_issue_file_is_a_named_problem_and_the_other_issues_still_run(
    auto_project: AutoProject, nothing_left: None
) -> None:
    key = auto_project.new_issue("write hello.txt hi\\n")
    issues = auto_project.directory / ".beflow" / "issues"
    (issues / "0009-bomb.md").write_text(ALIAS_BOMB)
    (issues / "0010-huge.md").write_text("---\nkey: 10\ntitle: huge\nstatus: ready\n---\n" + "x" * (5 << 20))

    listed = beflow_run(auto_project, "issues", "list", timeout=60)  # before: grew without end
    assert "0009-bomb.md:5: invalid YAML in the front matter: anchors and aliases" in listed.stdout + listed.stderr
    assert "0010-huge.md: the file is larger than 4 MiB" in listed.stdout + listed.stderr

    done = beflow_run(auto_project, "--auto", timeout=120)
    assert [r.issue for r in auto_project.records()] == [key]
    assert auto_project.issue(key).status == Status.REVIEW, done.stderr
