"""The bases of every tool payload: an Action is what the model asks a tool for, an Observation
what the tool answers (SPEC 2.7). Each kind pins `kind` to a Literal of its class name, the tag
the event schema's unions are discriminated by."""

from __future__ import annotations

from events.content import Content, Strict, TextContent


class Action(Strict):
    """Base of every action kind; subclasses pin `kind` to a Literal of their class name."""

    kind: str


class Observation(Strict):
    """Base of every observation kind: what the model reads is `content`."""

    kind: str
    content: list[Content] = []
    is_error: bool = False

    @property
    def text(self) -> str:
        return "\n".join(c.text for c in self.content if isinstance(c, TextContent))


__all__ = ["Action", "Observation"]
