"""The issue operations in the one registry: what they declare, and what they do for people and for agents."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import beflow.ops.issues
import beflow.ops.questions  # noqa: F401 - registers the operations
from beflow.app import open_tracker
from beflow.config import load_project
from beflow.errors import ConfigError, NotFoundError, OutOfScopeError, UsageError
from beflow.ops.operations import REGISTRY, Context
from beflow.trackers import LocalTracker, Status
from tests.support.projects import config_file


@pytest.fixture
def context(repo: Path) -> Context:
    return Context(project=load_project(), opens_tracker=open_tracker, actor="alice")


@pytest.fixture
def agent(repo: Path) -> Context:
    """What the MCP server will build for an agent bound to issue 1."""
    return Context(project=load_project(), opens_tracker=open_tracker, actor="agent (run r1)", bound_issue="1")


def call(context: Context, name: str, **arguments: object) -> object:
    return REGISTRY[name].call(context, arguments)


def test_the_operations_and_what_they_declare() -> None:
    declared = {
        name: (op.safety, op.agent, op.issue_field) for name, op in REGISTRY.items() if name.startswith("issue.")
    }
    assert declared == {
        "issue.list": ("read", False, None),
        "issue.show": ("read", True, "key"),
        "issue.new": ("action", True, None),
        "issue.comment": ("action", True, "key"),
        "issue.set_status": ("action", True, "key"),
        "issue.close": ("action", False, "key"),
        "issue.reopen": ("action", False, "key"),
        "issue.rework": ("action", False, "key"),
        "issue.set_priority": ("action", False, "key"),
        "issue.ask": ("action", True, "key"),
        "issue.answer": ("action", False, "key"),
    }
    for name in declared:
        op = REGISTRY[name]
        assert op.description and op.title
        assert op.input.model_json_schema()["type"] == "object"
    assert REGISTRY["issue.show"].annotations()["readOnlyHint"] is True
    assert REGISTRY["issue.comment"].input.model_json_schema()["properties"]["text"]["maxLength"] == 64_000


def test_the_project_tracker_is_the_local_one_in_its_configured_directory(repo: Path) -> None:
    config_file(repo).write_text('{"tracker": {"dir": "issues"}}')
    tracker = open_tracker(load_project())
    assert isinstance(tracker, LocalTracker)
    assert tracker.directory == repo / "issues"


def test_the_github_tracker_needs_a_token(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_file(repo).write_text('{"tracker": {"kind": "github", "repo": "acme/app"}}')
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigError, match=r"no GitHub token: \$GITHUB_TOKEN is not set"):
        open_tracker(load_project())


def test_a_person_files_ready_issues_comments_and_closes_them(context: Context) -> None:
    issue = call(context, "issue.new", title="Fix the login crash", labels=["bug"], priority=1)
    assert (issue.key, issue.status) == ("1", Status.READY)
    commented = call(context, "issue.comment", key="#1", text="Only on Safari.")
    assert (commented.key, commented.comment.author) == ("1", "alice")
    change = call(context, "issue.close", key="1", note="Fixed upstream.")
    assert (change.previous, change.status, change.changed) == (Status.READY, Status.CLOSED, True)
    again = call(context, "issue.close", key="1")
    assert again.changed is False
    assert call(context, "issue.reopen", key="1").status == Status.READY
    shown = call(context, "issue.show", key="1")
    assert [c.text for c in shown.comments] == ["Only on Safari.", "Fixed upstream."]
    assert shown.claim is None
    assert [i.key for i in call(context, "issue.list", status="ready").issues] == ["1"]


def test_a_person_moves_an_issue_in_the_queue_by_its_priority(context: Context) -> None:
    call(context, "issue.new", title="First")
    call(context, "issue.new", title="Second")
    tracker = context.open_tracker()
    assert [i.key for i in tracker.ready()] == ["1", "2"]
    change = call(context, "issue.set_priority", key="#2", priority=0)
    assert change.model_dump() == {"key": "2", "title": "Second", "previous": 2, "priority": 0}
    assert [i.key for i in tracker.ready()] == ["2", "1"]
    assert call(context, "issue.set_priority", key="2", priority=0).previous == 0  # (the same again: nothing to do)
    with pytest.raises(UsageError, match="priority: "):
        call(context, "issue.set_priority", key="2", priority=-1)
    with pytest.raises(NotFoundError):
        call(context, "issue.set_priority", key="9", priority=1)


def test_show_says_who_holds_the_issue(context: Context) -> None:
    call(context, "issue.new", title="Fix it")
    tracker = context.open_tracker()
    with tracker.claim("1", owner="run r1"):
        assert call(context, "issue.show", key="1").claim.owner == "run r1"


def test_invalid_input_is_a_usage_error_naming_the_operation_and_the_field(context: Context) -> None:
    def message(name: str, **arguments: object) -> str:
        with pytest.raises(UsageError) as caught:
            call(context, name, **arguments)
        assert caught.value.exit_code == 2
        return caught.value.message

    assert message("issue.new", title="") == 'issue.new: title: expected at least 1 character (got "")'
    assert message("issue.set_status", key="1", status="finished") == (
        "issue.set_status: status: expected 'open', 'ready', 'in_progress', 'blocked', 'review', 'done', 'failed' or "
        """'closed' (got "finished")"""
    )
    # a long value is cut short, not echoed whole
    assert message("issue.comment", key="1", text="x" * 64_001) == (
        f'issue.comment: text: expected at most 64000 characters (got "{"x" * 78}…)'
    )


def test_every_invalid_field_is_one_line_and_never_pydantics_own_text(context: Context) -> None:
    with pytest.raises(UsageError) as caught:
        call(context, "issue.new", title="Fix it", priority=5000, labels="bug", colour="red")

    assert caught.value.message.splitlines() == [
        'issue.new: labels: expected a list (got "bug")',
        "issue.new: priority: expected a number of at most 1000 (got 5000)",
        "issue.new: colour: unknown key (expected one of: body, labels, priority, status, title)",
    ]
    assert "pydantic" not in caught.value.message


def test_a_status_change_outside_the_table_is_refused(context: Context) -> None:
    call(context, "issue.new", title="Fix it", status="open")
    with pytest.raises(UsageError, match="cannot go from open to review"):
        call(context, "issue.set_status", key="1", status="review")


def test_an_agent_works_on_its_bound_issue_only(context: Context, agent: Context) -> None:
    call(context, "issue.new", title="Agent's issue")
    call(context, "issue.new", title="Someone else's")
    assert call(agent, "issue.show", key="1").title == "Agent's issue"
    call(context, "issue.set_status", key="1", status="in_progress")  # (its run took it)
    call(agent, "issue.set_status", key="1", status="review")
    commented = call(agent, "issue.comment", key="1", text="Working on it.")
    assert commented.comment.author == "agent (run r1)"
    for name, arguments in [
        ("issue.show", {}),
        ("issue.comment", {"text": "hi"}),
        ("issue.set_status", {"status": "closed"}),
    ]:
        with pytest.raises(UsageError, match="works on issue 1 only; it cannot act on issue 2"):
            call(agent, name, key="2", **arguments)
    assert call(context, "issue.show", key="2").comments == []


@pytest.mark.parametrize("status", ["ready", "done", "closed", "open", "in_progress"])
def test_an_agent_sets_its_issue_to_review_or_failed_only(context: Context, agent: Context, status: str) -> None:
    # Re-queueing, accepting and closing are a person's decisions (an agent re-queued itself past max_attempts).
    call(context, "issue.new", title="Agent's issue")
    call(context, "issue.set_status", key="1", status="in_progress")
    with pytest.raises(OutOfScopeError, match=f"review or failed only; {status} is a person's decision"):
        call(agent, "issue.set_status", key="1", status=status, note="said")
    issue = call(context, "issue.show", key="1")
    assert issue.status == Status.IN_PROGRESS and issue.comments == []
    assert call(agent, "issue.set_status", key="1", status="failed").status == Status.FAILED
    call(context, "issue.close", key="1")  # a person still may
    assert call(context, "issue.show", key="1").status == Status.CLOSED


def test_an_agents_words_carry_no_mark_of_beflows(context: Context, agent: Context) -> None:
    from beflow.trackers.local_feedback import is_rework

    call(context, "issue.new", title="Agent's issue")
    for text in ["<!-- beflow:rework -->\nmore rounds", "<!--beflow--> mine", "x <!-- BEFLOW:answer 0123 -->"]:
        comment = call(agent, "issue.comment", key="1", text=text).comment
        assert not is_rework(comment) and "<!--" not in comment.text and "&lt;!--" in comment.text
    assert call(agent, "issue.comment", key="1", text="<!-- a note of its own -->").comment.text.startswith("<!--")
    person = call(context, "issue.rework", key="1", text="a person's rework").comment
    assert is_rework(person)


def test_an_agent_files_follow_ups_as_open_with_where_they_came_from(agent: Context) -> None:
    call(agent, "issue.new", title="Agent's issue")  # key 1, which the agent is bound to
    follow_up = call(agent, "issue.new", title="Flaky test in auth", body="test_login fails 1 in 10.")
    assert follow_up.status == Status.OPEN
    assert follow_up.body == "test_login fails 1 in 10.\n\n_Follow-up of issue 1, filed by agent (run r1)._"
    # The link back: the bound issue says what was split off it.
    assert call(agent, "issue.show").comments[-1].text == f"Follow-up filed: issue {follow_up.key} — Flaky test in auth"
    assert call(agent, "issue.show").comments[-1].author == "agent (run r1)"
    with pytest.raises(UsageError, match="issues filed by an agent are open"):
        call(agent, "issue.new", title="Do it now", status="ready")


def test_an_unknown_key_is_not_found(context: Context) -> None:
    with pytest.raises(NotFoundError, match="there are no issues yet"):
        call(context, "issue.show", key="3")


#: An input for each operation that writes issues.
WRITES = {
    "issue.new": {"title": "x"},
    "issue.comment": {"key": "1", "text": "x"},
    "issue.rework": {"key": "1", "text": "x"},
    "issue.set_status": {"key": "1", "status": "review"},
    "issue.close": {"key": "1"},
    "issue.reopen": {"key": "1"},
    "issue.set_priority": {"key": "1", "priority": 0},
    "issue.ask": {"key": "1", "question": "x"},
    "issue.answer": {"key": "1", "text": "x"},
}


def test_outside_a_git_repository_every_issue_write_is_refused_before_anything_is_read(
    context: Context, repo: Path
) -> None:
    # The CLI, `mcp serve` and the HTTP API all call these: each refuses as `beflow init` does.
    writing = {name for name, op in REGISTRY.items() if name.startswith("issue.") and op.access == "write"}
    assert writing == set(WRITES)
    call(context, "issue.new", title="first")
    shutil.rmtree(repo / ".git")
    reads = []
    tracker = context.open_tracker()
    assert isinstance(tracker, LocalTracker)
    original = tracker.get
    tracker.get = lambda key: reads.append(key) or original(key)  # type: ignore[method-assign]
    for name, arguments in WRITES.items():
        with pytest.raises(UsageError, match="is not inside a git repository; nothing was written") as refused:
            call(context, name, **arguments)
        assert refused.value.code == "usage"
    assert reads == []
    assert [i.title for i in tracker.listing().issues] == ["first"]


def test_doctor_counts_issues_and_names_every_broken_file_with_its_line(context: Context) -> None:
    from beflow.doctor import check_tracker

    assert check_tracker(context.project).detail.endswith(": 0 issues")
    call(context, "issue.new", title="a")
    call(context, "issue.new", title="b", status="open")
    check = check_tracker(context.project)
    assert check.ok and check.detail.endswith(": 2 issues (1 open, 1 ready)")

    broken = context.project.tracker_dir / "0003-broken.md"
    broken.write_text("---\nkey: 3\ntitle: [unclosed\nstatus: ready\n---\n")
    check = check_tracker(context.project)
    assert not check.ok
    assert (
        f"{broken}:4: invalid YAML in the front matter: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line 3)" in check.detail
    )
    assert check.fix and "`beflow docs trackers`" in check.fix

    (context.project.tracker_dir / "0004-two-wrongs.md").write_text(
        "---\nkey: 4\ntitle: t\nstatus: nope\npriority: high\n---\n"
    )
    check = check_tracker(context.project)
    assert "; 3 problems in 2 files:\n" in check.detail, check.detail


def test_the_command_line_prints_the_same_one_line_message_and_exits_2(repo: Path, beflow) -> None:
    result = beflow("issues", "new", "")

    assert result.exit_code == 2
    assert result.stderr == 'error: issue.new: title: expected at least 1 character (got "")\n'


def test_an_agent_cannot_make_its_follow_up_ready_or_urgent_through_labels(agent: Context) -> None:
    call(agent, "issue.new", title="Agent's issue")
    labels = ["bug", "beflow:ready", "Beflow:Ready", " beflow:ready ", "priority:0", "ｐｒｉｏｒｉｔｙ:０"]
    follow_up = call(agent, "issue.new", title="Queue me", labels=labels, priority=0)
    assert (follow_up.status, follow_up.labels, follow_up.priority) == (Status.OPEN, ["bug"], 2)
    assert call(agent, "issue.new", title="Later", priority=5).priority == 5  # less urgent is the agent's to say


def test_an_agents_words_stay_as_said_on_the_local_tracker(agent: Context) -> None:
    # Only GitHub reads mentions and references: locally, an agent's comment, note and follow-up keep every byte.
    said = "Fixes #2, see GH-3; cc @org/security-team"
    call(agent, "issue.new", title="Agent's issue")
    assert call(agent, "issue.comment", key="1", text=said).comment.text == said
    open_tracker(agent.project).set_status("1", Status.READY)
    open_tracker(agent.project).set_status("1", Status.IN_PROGRESS)
    call(agent, "issue.set_status", key="1", status="failed", note=said)
    follow_up = call(agent, "issue.new", title=said, body=said)
    assert follow_up.title == said and follow_up.body.startswith(f"{said}\n\n_Follow-up of issue 1")
    texts = [comment.text for comment in open_tracker(agent.project).get("1").comments]
    assert texts.count(said) == 2  # the comment and the note


def test_a_follow_up_body_of_the_documented_maximum_is_filed_with_its_footer(agent: Context) -> None:
    from beflow.trackers.issue import MAX_TEXT

    call(agent, "issue.new", title="Agent's issue")
    follow_up = call(agent, "issue.new", title="Long", body="x" * MAX_TEXT)
    assert follow_up.body.startswith("x" * MAX_TEXT) and follow_up.body.endswith("filed by agent (run r1)._")
    assert open_tracker(agent.project).get(follow_up.key).body == follow_up.body  # and read back whole
    with pytest.raises(UsageError, match="64000"):
        call(agent, "issue.new", title="Longer", body="x" * (MAX_TEXT + 1))


@pytest.mark.parametrize("label", ["x" * 100_000, "x" * 51, "a\u2028b", "a\nb", "a\x1b[2Jb", "a\x00b"])
def test_a_label_no_tracker_can_keep_is_refused_at_input_without_echoing_it(context: Context, label: str) -> None:
    with pytest.raises(UsageError, match="label") as refused:
        call(context, "issue.new", title="Labelled", labels=[label])
    assert label not in refused.value.message and len(refused.value.message) < 300
    assert call(context, "issue.list").issues == []  # nothing filed


def test_a_label_of_fifty_characters_is_kept(context: Context) -> None:
    made = call(context, "issue.new", title="Labelled", labels=["x" * 50])
    assert call(context, "issue.show", key=made.key).labels == ["x" * 50]
