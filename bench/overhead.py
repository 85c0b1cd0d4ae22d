"""How much does beflow add around an agent run? Ratios against a bare baseline, measured in one process.

    python bench/overhead.py [--runs N]

- run: ``acpx exec`` of the same agent turn, bare (in a plain git worktree) vs. one full ``beflow`` run of an
  issue (claim, worktree, prompt, MCP injection and restore, acpx, commit, record, tracker update, cleanup);
- inject: one ``managed_acpxrc`` session (journal, lock, atomic write, restore) vs. writing and removing the
  same file directly;
- dispatch: one ``beflow watch --once`` tick running a batch of issues in parallel (``concurrency`` = the batch)
  vs. the same agent turns as bare ``acpx exec`` calls, all at once.

Uses the pinned acpx (tools/acpx, installed by ./scripts/test) and the test agent in tests/support. Timings on a
shared machine are noisy: compare the ratios, and the medians, not single numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
ACPX = ROOT / "tools" / "acpx" / "node_modules" / ".bin" / "acpx"
AGENT = f"{sys.executable} {ROOT / 'tests' / 'support' / 'acp_agent.py'}"
PROMPT = "acp-test: write out.txt hello"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# bench\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-qm", "init")
    (repo / ".beflow").mkdir()
    (repo / ".beflow" / "config.json").write_text(
        f'{{"agent": {{"command": "{AGENT}"}}, "acpx": ["{ACPX}"], "mcp": {{"enabled": true}}, "timeout": 120}}'
    )
    (repo / ".mcp.json").write_text('{"mcpServers": {"files": {"command": "echo"}}}')
    return repo


def timed(fn) -> float:  # type: ignore[no-untyped-def] - a tiny harness
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def bare_run(repo: Path, index: int) -> None:
    worktree = repo.parent / f"bare-{index}"
    git(repo, "worktree", "add", "-q", "-b", f"bare/{index}", str(worktree))
    bare_exec(worktree)


def bare_exec(worktree: Path) -> None:
    subprocess.run(
        [str(ACPX), "--cwd", str(worktree), "--format", "json", "--approve-all", "--agent", AGENT, "exec", PROMPT],
        check=True,
        capture_output=True,
    )


BEFLOW = [sys.executable, "-m", "beflow"]


def file_issue(repo: Path, index: int) -> None:
    argv = [*BEFLOW, "issues", "new", f"bench {index}", "--body", PROMPT]
    subprocess.run(argv, cwd=repo, check=True, capture_output=True)


def beflow_run(repo: Path, index: int) -> None:
    subprocess.run([*BEFLOW, "--auto", str(index + 1)], cwd=repo, check=True, capture_output=True)


def bare_batch(repo: Path, count: int, offset: int) -> None:
    """``count`` bare runs at once (their worktrees made one after the other: git races on parallel adds)."""
    worktrees = []
    for index in range(offset, offset + count):
        worktree = repo.parent / f"bare-{index}"
        git(repo, "worktree", "add", "-q", "-b", f"bare/{index}", str(worktree))
        worktrees.append(worktree)
    with ThreadPoolExecutor(max_workers=count) as pool:
        list(pool.map(bare_exec, worktrees))


def file_issues(repo: Path, count: int) -> None:
    """``count`` ready issues, filed through the tracker directly (not timed)."""
    from beflow.app import open_tracker
    from beflow.config import load_project

    tracker = open_tracker(load_project(repo / ".beflow" / "config.json"))
    for index in range(count):
        tracker.create(title=f"batch {index}", body=PROMPT)


def watch_batch(repo: Path) -> None:
    """The ready issues through one ``beflow watch --once`` tick (concurrency = the batch: one tick runs them all)."""
    subprocess.run([*BEFLOW, "watch", "--once", "--json"], cwd=repo, check=True, capture_output=True)


def inject_once(directory: Path) -> None:
    from beflow.mcp.acp import AcpStdio
    from beflow.mcp.inject import managed_acpxrc

    servers = [AcpStdio(name="files", command="echo", args=[], env=[])]

    async def session() -> None:
        async with managed_acpxrc(directory, servers):
            pass

    anyio.run(session)


def write_once(directory: Path) -> None:
    target = directory / ".acpxrc.json"
    target.write_text('{"mcpServers": []}')
    target.unlink()


def report(name: str, baseline: list[float], measured: list[float]) -> None:
    base, value = statistics.median(baseline), statistics.median(measured)
    print(f"{name:<8} bare {base * 1000:9.1f} ms   beflow {value * 1000:9.1f} ms   ratio {value / base:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not ACPX.exists():
        sys.exit(f"{ACPX} is missing: run ./scripts/test once (it installs the pinned acpx)")
    with tempfile.TemporaryDirectory(prefix="beflow-bench-") as scratch:
        root = Path(scratch)
        os.environ["BEFLOW_HOME"] = str(root / "beflow-home")
        os.environ.setdefault("GIT_AUTHOR_NAME", "bench")
        os.environ.setdefault("GIT_AUTHOR_EMAIL", "bench@example.com")
        os.environ.setdefault("GIT_COMMITTER_NAME", "bench")
        os.environ.setdefault("GIT_COMMITTER_EMAIL", "bench@example.com")
        repo = make_repo(root)
        for index in range(args.runs):
            file_issue(repo, index)
        bare, full = [], []
        for index in range(args.runs):  # interleaved, so that load on the machine hits both alike
            bare.append(timed(lambda i=index: bare_run(repo, i)))
            full.append(timed(lambda i=index: beflow_run(repo, i)))
        report("run", bare, full)
        directory = root / "inject"
        directory.mkdir()
        plain = [timed(lambda: write_once(directory)) for _ in range(50)]
        managed = [timed(lambda: inject_once(directory)) for _ in range(50)]
        report("inject", plain, managed)
        batch, bare_batches, watch_batches = 4, [], []
        config = json.loads((repo / ".beflow" / "config.json").read_text())
        config["watch"] = {"concurrency": batch, "interval": 1}
        (repo / ".beflow" / "config.json").write_text(json.dumps(config))
        for round_ in range(max(1, args.runs // 2)):
            offset = 1000 + round_ * batch
            bare_batches.append(timed(lambda o=offset: bare_batch(repo, batch, o)))
            file_issues(repo, batch)
            watch_batches.append(timed(lambda: watch_batch(repo)))
        report("dispatch", bare_batches, watch_batches)


if __name__ == "__main__":
    main()
