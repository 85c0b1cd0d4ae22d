"""The ``docs.locate`` operation: where beflow's own docs are (:mod:`beflow.docs`), and which page to read.

The operation returns locations and a next step instead of the text: an agent reads the pages with its own file
tools, which is faster and keeps large content out of the MCP payload.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from beflow import __version__
from beflow.docs import doc_pages, docs_dir
from beflow.errors import NotFoundError
from beflow.ops.operations import Context, Input, operation

# -- the docs.locate operation -----------------------------------------------------------------------------------------


class DocsQuery(Input):
    topic: str | None = Field(
        default=None,
        max_length=100,
        description="A word of what you want to know (e.g. 'config', 'runs', 'mcp', 'status'); leave it out for "
        "every page.",
    )


class Page(BaseModel):
    topic: str = Field(description="The page's name, e.g. 'config'.")
    title: str
    command: str = Field(description="The command that prints the page where beflow is installed: `beflow docs TOPIC`.")
    path: str | None = Field(
        description="The absolute path of the Markdown file; read it with your own tools. None over HTTP: the file "
        "is on the server's machine."
    )


class DocsLocation(BaseModel):
    version: str = Field(description="The installed beflow's version: the pages describe exactly this one.")
    directory: str | None = Field(description="Where the pages are (None over HTTP: on the server's machine).")
    pages: list[Page] = Field(description="The pages that match the topic (every page without one).")
    hint: str


def _located() -> list[tuple[Page, Path]]:
    """Every page of the installed docs, by name (the pages `beflow docs` shows), and its file."""
    return [
        (Page(topic=p.topic, title=p.title, command=f"beflow docs {p.topic}", path=str(p.path)), p.path)
        for p in doc_pages()
    ]


def _matches(page: Page, path: Path, topic: str) -> bool:
    word = topic.lower()
    if word in page.topic.lower() or word in page.title.lower():
        return True
    return word in path.read_text(encoding="utf-8").lower()


@operation(
    "docs.locate",
    title="Find beflow's docs",
    description="Locate the version-accurate docs of the installed beflow (config, modes, runs, trackers, MCP). Call "
    "it before answering a question about beflow or its config; do not rely on what you remember. Returns paths, "
    "not text: read the page with your own tools. Cheap.",
    safety="read",
    agent=True,
    category="docs",
    tags=("docs", "read"),
)
def locate(context: Context, payload: DocsQuery) -> DocsLocation:
    everything = _located()
    topic = payload.topic
    chosen = [page for page, path in everything if not topic or _matches(page, path, topic)]
    if not chosen:
        names = ", ".join(page.topic for page, _ in everything)
        raise NotFoundError(f"docs.locate: no page mentions {topic!r}", fix=f"The pages are: {names}.")
    # The page that names the topic first: the agent reads one file, not all of them.
    chosen.sort(key=lambda p: topic is not None and topic.lower() not in p.topic.lower())
    if context.remote:  # (the files are on the server's machine: the caller cannot read them there)
        chosen = [page.model_copy(update={"path": None}) for page in chosen]
        first = f"Run `{chosen[0].command}` where beflow is installed"
    else:
        first = f"Read {chosen[0].path} first"
    return DocsLocation(
        version=__version__,
        directory=None if context.remote else str(docs_dir()),
        pages=chosen,
        hint=first
        + (" (it is the page about that topic)" if topic else "")
        + "; each page is one topic, in Markdown, written for this version of beflow.",
    )
