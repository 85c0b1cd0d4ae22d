"""``beflow docs``."""

from __future__ import annotations

import click
from rich.markup import escape

from beflow.cli.common import out
from beflow.docs import doc_page, doc_pages


@click.command("docs", epilog="Examples:\n\n  beflow docs\n\n  beflow docs config | less\n\n  beflow docs mcp --path")
@click.argument("topic", required=False)
@click.option("--path", "show_path", is_flag=True, help="Print where the page is installed instead of the page.")
def command(topic: str | None, show_path: bool) -> None:
    """Print a page of beflow's documentation (Markdown), or, with no TOPIC, the list of topics."""
    if topic is None:
        for each in doc_pages():
            out.print(f"  {escape(each.topic):<16} {escape(str(each.path) if show_path else each.title)}")
        out.print("Read one with `beflow docs TOPIC`.")
        return
    found = doc_page(topic)
    click.echo(str(found.path) if show_path else found.text(), nl=show_path)
