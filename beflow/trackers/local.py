"""The local tracker: one Markdown file per issue in ``tracker.dir`` (default ``.beflow/issues``).

A file is YAML front matter, the body, then the comments after a marker line: its format (rendering, parsing,
the careful YAML loader, the problems a file can have) is :mod:`beflow.trackers.local_format`, the SQLite
index that spares re-reading unchanged files is :mod:`beflow.trackers.local_index`, and keeping that index in step
with the directory is :mod:`beflow.trackers.local_files`. This module answers and writes.

Keys are sequential numbers, allocated under a lock so that two concurrent ``new`` never collide. Every write is
atomic and happens under a per-issue lock after re-reading the file, so concurrent writers (and hand edits made
before them) are never lost. Claims are OS file locks under ``.beflow/claims/``: the OS drops them when the holder
dies. docs/trackers.md describes all of it for users.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import difflib
import hashlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from beflow.errors import NotFoundError, excerpt
from beflow.feedback import Feedback, Gathered
from beflow.paths import STATE_DIR, state_dir
from beflow.system import startup
from beflow.system.files import atomic_write, read_regular
from beflow.trackers.blockers import Blocker, held_by
from beflow.trackers.claims import Claim, ClaimInfo, ClaimsOver, ClaimStore, FileClaims, orphans_of, ready_of
from beflow.trackers.issue import (
    DEFAULT_PRIORITY,
    Comment,
    FileProblem,
    Issue,
    IssueRow,
    Listing,
    ListingStream,
    Status,
    check_transition,
    draft_comment,
    draft_issue,
    normalize_key,
    utc_now,
)
from beflow.trackers.local_feedback import gathered as local_gathered
from beflow.trackers.local_feedback import rework_text
from beflow.trackers.local_files import IssueFiles, number_of, number_of_name
from beflow.trackers.local_format import IssueFileError, file_name, render
from beflow.trackers.local_index import IssueIndex

if TYPE_CHECKING:
    import filelock
else:
    filelock = startup.module("filelock")  # reading needs no lock

#: How long a write waits for another write to the same issue (they take milliseconds).
WRITE_WAIT = 30.0
#: Seconds to wait for another process's write to the index before reading the files instead: it is a cache, and
#: beflow's own writes to it take milliseconds.
INDEX_WAIT = 2.0


# --- the tracker ---------------------------------------------------------------------------------------------------


class LocalTracker:
    """Issues as Markdown files in ``directory``; locks and claims in the project's ``.beflow/``."""

    def __init__(self, directory: Path, project_dir: Path, claims: ClaimsOver | None = None) -> None:
        self.directory = directory
        self.project_dir = project_dir
        self.description = f"local issues in {directory}"
        # A local tracker lives on one machine: its directory's name and a short digest of its path tell two apart.
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", project_dir.name)[:40] or "project"
        self.identity = f"local:{name}-{hashlib.sha256(str(directory).encode()).hexdigest()[:10]}"
        self._index = IssueIndex(directory, project_dir / STATE_DIR, wait=INDEX_WAIT)
        #: The issue files, each parsed once per change (beflow.trackers.local_files).
        self._files = IssueFiles(directory, self._index)
        #: Who runs which issue: file locks in ``.beflow/claims`` (made, and git-ignored, on the first claim), or the
        #: engine's store over them (a fleet's, which holds across machines).
        self.files_claims = FileClaims(project_dir / STATE_DIR / "claims", create=lambda: self._state() / "claims")
        self.claims: ClaimStore = claims(self.identity, self.files_claims) if claims else self.files_claims

    def held_secrets(self) -> list[str]:
        """None: the issues are files of the project."""
        return []

    def inert(self, text: str) -> str:
        """As it is: nothing reads a local issue's words as mentions or links."""
        return text

    def rework(self, key: str, text: str, author: str) -> Comment:
        """A comment marked as a request for rework: the issue's next round answers it."""
        return self.comment(key, rework_text(text), author)

    # paths -------------------------------------------------------------------------------------------------------

    def _state(self) -> Path:
        """``.beflow/`` (created, and git-ignored, on first use)."""
        return state_dir(self.project_dir)

    def check_writable(self) -> None:
        """Refused (:func:`beflow.paths.outside_git`) where the project is in no git work tree."""
        self._state()

    def _lock(self, name: str) -> filelock.FileLock:
        path = self._state() / "tracker" / "locks" / f"{name}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        return filelock.FileLock(path, timeout=WRITE_WAIT, thread_local=False)

    # reading (the files: beflow.trackers.local_files) -------------------------------------------------------------

    @property
    def scans(self) -> int:
        """How many times this tracker looked at every file (the cost that grows with the tracker)."""
        return self._files.scans

    def reading_once(self) -> contextlib.AbstractContextManager[None]:
        """Questions within the block are answered from one look at the directory (see ``trackers.reading_once``);
        this thread's own writes make its next question look again."""
        return self._files.reading_once()

    def watched_directories(self) -> list[Path]:
        """Where a change may make an issue startable: the issue files, and the claim notes (a claim released)."""
        return [self.directory, self.files_claims.directory]

    def _issues(self, status: Status | None = None, label: str | None = None) -> list[Issue]:
        """The issues (with ``status`` and ``label``), by key, built from the index after a sync."""
        return self._files.answer(lambda: self._selected(status, label))

    def _selected(self, status: Status | None = None, label: str | None = None) -> list[Issue]:
        return [Issue.model_validate_json(text) for (text,) in self._index.select("issue", status, label)]

    def _scan(self) -> tuple[list[Issue], list[FileProblem]]:
        """Every issue that parses (by key) and a problem per file that does not; a repeated key is a problem."""
        return self._files.answer(lambda: (self._selected(), self._index.problems()))

    def listing(self, status: Status | None = None, label: str | None = None) -> Listing:
        issues, problems = self._files.answer(lambda: (self._selected(status, label), self._index.problems()))
        return Listing(issues=issues, problems=problems)

    def stream(self, status: Status | None = None, label: str | None = None) -> ListingStream:
        """The listing row by row, straight from the index: no issue is built, none is held (100k issues list in
        constant memory). ``issues list`` renders this."""
        problems = self._files.answer(self._index.problems)

        def rows() -> Iterator[IssueRow]:
            columns = "key, status, priority, title, labels, updated, json_extract(issue, '$.blocked_by')"
            for key, state, priority, title, labels, updated, blocked in self._index.select(columns, status, label):
                held = None
                if blocked not in (None, "[]") and state == Status.READY.value:  # (a few rows: one look each)
                    held = held_by(self._blockers_of(str(key), json.loads(blocked)))
                yield IssueRow(
                    str(key),
                    Status(state),
                    priority,
                    title,
                    json.loads(labels),
                    dt.datetime.fromisoformat(updated),
                    held,
                )

        def documents() -> Iterator[str]:
            for (text,) in self._index.select("issue", status, label):
                yield text

        return ListingStream(problems, rows, documents)

    def ready(self) -> list[Issue]:
        return ready_of(self._issues(Status.READY), self.claims)

    def blockers(self, issue: Issue) -> list[Blocker]:
        """The issues ``issue``'s ``blocked_by`` names, with their status as the index has it (one query)."""
        return self._files.answer(lambda: self._blockers_of(issue.key, issue.blocked_by)) if issue.blocked_by else []

    def _blockers_of(self, key: str, blocked_by: list[str]) -> list[Blocker]:
        found = self._index.blockers(blocked_by, key)
        return [Blocker(k, *found[k]) if k in found else Blocker(k, None) for k in blocked_by]

    def get(self, key: str) -> Issue:
        """The issue read from its file, never from its row in the index: the index only says which file to read.
        The index is a cache any process of the user can write (an agent's too); what a run reads, and what
        ``issues show`` shows, is what the file says."""
        wanted = normalize_key(key)
        # The file of the key, by the index or by its name (``0007-...``), when its front matter agrees: no scan.
        if wanted.isdigit():
            found = self._by_name(wanted, self._index_names(wanted))
            # Not in the index (a file added since, or renamed): the names in the directory, still without a parse.
            found = found or self._by_name(wanted, self._files.files_named(wanted))
            if found is not None:
                return found
        issues, problems = self._scan()
        for issue in issues:
            if issue.key == wanted and issue.path is not None:
                found = self._by_name(wanted, [issue.path.name])
                if found is not None:
                    return found
        # The file of that key may be the broken one: say what is wrong with it rather than "not found".
        broken = [p for p in problems if number_of(p.path) == wanted]
        if broken:
            raise IssueFileError(broken)
        raise NotFoundError(self._not_found(key, issues), fix="`beflow issues list` shows every issue.")

    def _by_name(self, key: str, names: list[str]) -> Issue | None:
        for name in names:
            found = self._files.cached(name, from_file=True)
            if isinstance(found, Issue) and found.key == key:
                return found
        return None

    def _index_names(self, key: str) -> list[str]:
        try:
            return self._index.names_of(key)
        except sqlite3.Error as error:
            self._index.set_back(error)
            return []

    def _not_found(self, key: str, issues: list[Issue]) -> str:
        message = f"no issue {excerpt(key, quote=False)} in {self.directory}"
        if not issues:
            return f"{message} (there are no issues yet)"
        wanted = normalize_key(key)
        close = difflib.get_close_matches(wanted, [i.key for i in issues], n=3, cutoff=0.5)
        if not wanted.isdigit():  # perhaps a word from the title
            close += [i.key for i in issues if wanted.lower() in i.title.lower() and i.key not in close][:3]
        if not close:
            return f"{message}; keys run from {issues[0].key} to {issues[-1].key}"
        titles = {i.key: i.title for i in issues}
        return f"{message}; did you mean: " + ", ".join(f"{k} ({titles[k]})" for k in close)

    # writing -----------------------------------------------------------------------------------------------------

    def _write(self, issue: Issue) -> None:
        assert issue.path is not None
        self._files.changed()
        atomic_write(issue.path, render(issue))

    def _update(self, key: str, change: Callable[[Issue], Issue]) -> Issue:
        """Read the issue afresh under its lock, change it, write it: concurrent writers never lose each other."""
        wanted = normalize_key(key)
        self.check_writable()  # before anything is read (and cached) on the way
        self.get(wanted)  # a clear error before taking any lock
        with self._lock(f"issue-{wanted}"):
            current = self.get(wanted)
            changed = change(current)
            if changed is not current:
                self._write(changed)
            return changed

    def create(
        self,
        title: str,
        body: str = "",
        labels: list[str] | None = None,
        priority: int = DEFAULT_PRIORITY,
        status: Status = Status.READY,
    ) -> Issue:
        draft = draft_issue(title, body, labels, priority, status)
        with self._lock("new"):
            key = str(self._last_key() + 1)
            path = self.directory / file_name(key, draft.title)
            issue = draft.model_copy(update={"key": key, "path": path, "url": path.absolute().as_uri()})
            self._write(issue)
            atomic_write(self._state() / "tracker" / "last-key", f"{key}\n")
        return issue

    def _last_key(self) -> int:
        """The highest key ever given here: in a file name, in a file, or (if its file was deleted) remembered."""
        # Keys are given in file names: the names suffice, without parsing, but for files named otherwise (by hand),
        # which are read (from the index when unchanged). A key typed by hand into a file named after another
        # counts once any beflow has read that file (the index's highest key).
        numbers = [0]
        for name in self._files.names(sort=False):
            number = number_of_name(name)
            if number is None:
                found = self._files.cached(name)
                number = found.key if isinstance(found, Issue) and found.key.isdigit() else None
            if number is not None:
                numbers.append(int(number))
        with contextlib.suppress(sqlite3.Error):
            numbers.append(self._index.max_key())
        with contextlib.suppress(OSError, ValueError):
            numbers.append(int(read_regular(self._state() / "tracker" / "last-key", limit=64).strip()))
        return max(numbers)

    def comment(self, key: str, text: str, author: str) -> Comment:
        new = draft_comment(text, author)

        def add(issue: Issue) -> Issue:
            return issue.model_copy(update={"comments": [*issue.comments, new], "updated": new.created})

        self._update(key, add)
        return new

    def set_status(self, key: str, status: Status, note: str | None = None, author: str = "beflow") -> Issue:
        status = Status(status)

        def move(issue: Issue) -> Issue:
            check_transition(issue.key, issue.status, status)
            if issue.status == status and not note:
                return issue  # nothing changes, nothing is written
            now = utc_now()
            comments = list(issue.comments)
            if note and note.strip():
                comments.append(Comment(author=author, created=now, text=note))
            return issue.model_copy(update={"status": status, "comments": comments, "updated": now})

        return self._update(key, move)

    def flag_label(self, flag: str) -> str:
        return flag  # (a local issue's labels are beflow's own: no prefix is needed to tell them apart)

    def flag(self, key: str, flag: str, note: str) -> Issue:
        """The label ``flag`` in the issue's front matter, and ``note`` as a comment, in one write."""
        label = self.flag_label(flag)

        def mark(issue: Issue) -> Issue:
            now = utc_now()
            comments = [*issue.comments, Comment(author="beflow", created=now, text=note)]
            labels = issue.labels if label in issue.labels else [*issue.labels, label]
            return issue.model_copy(update={"labels": labels, "comments": comments, "updated": now})

        return self._update(key, mark)

    def set_priority(self, key: str, priority: int, author: str = "beflow") -> Issue:
        """The issue's priority (lower runs first); the same priority again writes nothing."""

        def move(issue: Issue) -> Issue:
            if issue.priority == priority:
                return issue
            return issue.model_copy(update={"priority": priority, "updated": utc_now()})

        return self._update(key, move)

    # feedback (beflow.feedback.FeedbackSource: comments left with --rework) ------------------------------------

    def gather(self, key: str, branch: str) -> Gathered:
        return local_gathered(self.get(key))

    def reply(self, piece: Feedback, body: str) -> None:
        if piece.id.startswith("local:") and piece.reply_to is not None:  # (a piece another source gave is not ours)
            self.comment(piece.reply_to, body, author="beflow")

    # claims (file locks: beflow.trackers.claims) -----------------------------------------------------------------

    def claim(self, key: str, owner: str) -> Claim:
        return self.claims.claim(self.get(key).key, owner)

    def holder(self, key: str) -> ClaimInfo | None:
        return self.claims.holder(key)

    def orphaned(self) -> list[Issue]:
        return orphans_of(self._issues(Status.IN_PROGRESS), self.claims)

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self.claims.last_holder(key)
