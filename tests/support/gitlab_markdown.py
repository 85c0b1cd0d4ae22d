"""What GitLab would act on in a text it is given (a note, a merge request's title or description), as its pages
describe it: quick actions (a line starting with ``/``, outside what GitLab's quick-action parser takes for code: a
block between lines starting with three backticks), closing words before an issue reference or URL, and references
and mentions outside code (the Markdown renderer's code: fenced blocks and code spans)."""

from __future__ import annotations

import re

#: A quick action's line (GitLab's extractor: ``/command`` at the start of a line, in any case, once every carriage
#: return is deleted; taken here after blanks and quote marks too, to be on the safe side).
_QUICK = re.compile(r"^[ \t>]*/([a-z_]+)", re.M | re.I)
#: What the quick-action parser skips as code (its extractor's ``CODE_REGEX``): from a line starting with three
#: backticks to the next line that is three backticks.
_QUICK_CODE = re.compile(r"^```.+?\n```$", re.M | re.S)
#: GitLab's default closing pattern, before a reference (``#1``, ``group/project#1``) or an issue's URL.
_CLOSES = re.compile(
    r"\b(?:[Cc]los(?:e[sd]?|ing)|[Ff]ix(?:e[sd]|ing)?|[Rr]esolv(?:e[sd]?|ing)|[Ii]mplement(?:s|ed|ing)?):? +"
    r"(?:issues? +)?(?:[\w.-]+/[\w./-]+)?(?:#\d+|https?://\S+/-/issues/\d+)"
)
#: A reference or a mention: a sigil right before a name, a number or a quoted name; an iteration, a vulnerability
#: or a contact by its prefix; a link to an issue, merge request, epic or work item of the instance (which leaves a
#: "mentioned in" note there as a reference does).
_REFERENCE = re.compile(
    r"(?<![\w`])(?:[\w.-]+/[\w.-]+)?[#!&$%~@](?:\d+|[A-Za-z][\w.-]*|\"[^\"]+\")"
    r"|\*iteration:\d+|\[(?:vulnerability|contact):[^\]]+\]"
    r"|/-/(?:issues|merge_requests|epics|work_items|snippets)/\d+"
)


def _without_code(markdown: str) -> str:
    text = re.sub(r"^ {0,3}(`{3,}|~{3,})[^\n]*\n.*?(?:^ {0,3}\1[`~]*[ \t]*$|\Z)", "", markdown, flags=re.S | re.M)
    return re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", "", text)


def acted_on(markdown: str) -> list[str]:
    """What GitLab would act on in ``markdown``: quick actions, closing words with what they close, references."""
    quick = [f"/{m}" for m in _QUICK.findall(_QUICK_CODE.sub("", markdown.replace("\r", "")))]
    prose = _without_code(markdown)
    closes = _CLOSES.findall(prose)
    rest = _CLOSES.sub("", prose)
    return quick + closes + _REFERENCE.findall(rest)
