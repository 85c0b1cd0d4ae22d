"""What every forge's wire models share: a lenient base model, and reading an answer into models with the forge's
own error when it does not read (:mod:`beflow.trackers.github_wire`, :mod:`beflow.trackers.gitlab_wire`)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from beflow.errors import BeflowError


class Wire(BaseModel):
    """A payload of a forge's: fields beflow does not read are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


M = TypeVar("M", bound=BaseModel)


def problem(error: ValidationError) -> str:
    """The first thing wrong with a payload: where, and what (never the value: it may be anything)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


class Answers:
    """Reads one forge's answers: ``Answers("GitHub", MalformedAnswer)``, its errors naming the forge."""

    def __init__(self, forge: str, malformed: type[BeflowError]) -> None:
        self.forge, self.malformed = forge, malformed

    def parse(self, model: type[M], data: Any, what: str) -> M:
        """``data``, the forge's answer to ``what`` (``GET /repos/...``), as ``model``; else its malformed error."""
        try:
            return model.model_validate(data)
        except ValidationError as error:
            raise self.malformed(f"{self.forge}'s answer to {what} cannot be read: {problem(error)}") from None

    def listed(self, data: Any, what: str) -> list[Any]:
        """The items of a listing's answer (an empty answer has none); anything but a list is malformed."""
        if data is None:
            return []
        if not isinstance(data, list):
            raise self.malformed(f"{self.forge}'s answer to {what} cannot be read: it is not a list")
        return data

    def parse_list(self, model: type[M], data: Any, what: str) -> list[M]:
        """Every item of a listing as ``model``; one that does not read makes the whole answer malformed."""
        return [self.parse(model, item, f"{what} (item {n})") for n, item in enumerate(self.listed(data, what))]
