"""beflow's own docs, shipped inside the package (``beflow/docs/*.md``) so that they always match the beflow that is
running: one page per topic, read by ``beflow docs TOPIC`` wherever beflow is installed (messages point at them).
The reader stands apart from the operations so that ``beflow docs`` starts without loading them."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from beflow.errors import UsageError


@dataclass(frozen=True)
class DocPage:
    """One page of the shipped docs."""

    topic: str
    title: str
    path: Path

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")


def docs_dir() -> Path:
    """Where the installed docs are."""
    return Path(str(resources.files("beflow").joinpath("docs")))


def doc_pages() -> list[DocPage]:
    """Every page, by topic (the file name without ``.md``), with its title (the first heading)."""
    found = []
    for path in sorted(docs_dir().glob("*.md")):
        first = path.read_text(encoding="utf-8").lstrip().splitlines()[:1] or [path.stem]
        found.append(DocPage(path.stem, first[0].lstrip("#").strip().replace("`", ""), path))
    return found


def doc_page(topic: str) -> DocPage:
    """The page of ``topic``; a usage error naming the close ones when there is none."""
    by_topic = {p.topic: p for p in doc_pages()}
    wanted = topic.strip().lower().removesuffix(".md").removeprefix("docs/")
    if wanted in by_topic:
        return by_topic[wanted]
    close = difflib.get_close_matches(wanted, list(by_topic), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UsageError(f"no documentation topic {topic!r}{hint}", fix=f"Topics: {', '.join(by_topic)}.")
