"""Skills from the workspace: `AGENTS.md` (always on) and `.agents/skills/<name>/SKILL.md`.

A SKILL.md starts with front matter between `---` lines: `name`, `description`, and
optionally `triggers` (a list). The system prompt lists every skill by name and description;
`invoke_skill` returns a skill's body; a user message that contains a trigger (any case)
activates that skill once per conversation: its body travels with the message.

The front matter is the simple YAML subset skills use (scalars, quoted strings, `[a, b]` and
`- item` lists, `|` and `>` blocks), read here rather than through a YAML library. What is
read is bounded: file sizes, the number of skills, and the lengths of every field.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from events import TextContent

logger = logging.getLogger(__name__)

AGENTS_FILE = "AGENTS.md"
SKILLS_DIR = Path(".agents") / "skills"
SKILL_FILE = "SKILL.md"
MAX_SKILLS = 100
#: Bytes of a skill file read (a longer body is cut, and says so).
MAX_FILE_BYTES = 64 * 1024
MAX_DESCRIPTION = 1_024
MAX_TRIGGERS = 20
MAX_TRIGGER_LENGTH = 100


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str
    #: Path of the file, relative to the working directory.
    source: str
    triggers: tuple[str, ...] = ()
    #: In the system prompt whole (AGENTS.md), rather than listed and loaded on demand.
    always_on: bool = False


class SkillInfo(BaseModel):
    """A loaded skill, as GET /api/conversations/{id}/skills lists it."""

    name: str
    description: str
    triggers: list[str]
    source: str
    """Path of the skill's file, relative to the working directory."""
    always_on: bool
    """True for AGENTS.md: always in the system prompt, never invoked or triggered."""


class SkillList(BaseModel):
    skills: list[SkillInfo]


@dataclass
class SkillBook:
    """The skills of one conversation, and which ones its messages have activated."""

    skills: list[Skill]
    activated: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, working_dir: Path) -> SkillBook:
        """The skills of a workspace (blocking, bounded file reads: call it in a thread).

        What was activated lives as long as the book, i.e. the process: after a restart a
        trigger can activate a skill once more.
        """
        return cls(load(working_dir))

    @property
    def invocable(self) -> dict[str, Skill]:
        return {s.name: s for s in self.skills if not s.always_on}

    def info(self) -> SkillList:
        return SkillList(
            skills=[
                SkillInfo(
                    name=s.name,
                    description=s.description,
                    triggers=list(s.triggers),
                    source=s.source,
                    always_on=s.always_on,
                )
                for s in self.skills
            ]
        )

    def activate(self, text: str) -> list[tuple[Skill, str]]:
        """Skills a message activates (each once per conversation), with the trigger found."""
        lowered = text.lower()
        found = []
        for skill in self.skills:
            if skill.always_on or skill.name in self.activated:
                continue
            trigger = next((t for t in skill.triggers if t.lower() in lowered), None)
            if trigger is not None:
                self.activated.add(skill.name)
                found.append((skill, trigger))
        return found


def load(working_dir: Path) -> list[Skill]:
    """AGENTS.md first, then the skills in name order; unreadable files are skipped."""
    out: list[Skill] = []
    agents = working_dir / AGENTS_FILE
    text = _read(agents)
    if text is not None and text.strip():
        out.append(
            Skill(
                name=AGENTS_FILE,
                always_on=True,
                source=AGENTS_FILE,
                description="Instructions for working in this repository (always on).",
                body=text.strip(),
            )
        )
    root = working_dir / SKILLS_DIR
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    except OSError:
        folders = []
    seen: set[str] = set()
    for folder in folders:
        if len(out) >= MAX_SKILLS:
            logger.warning("more than %d skills in %s; the rest are ignored", MAX_SKILLS, root)
            break
        path = folder / SKILL_FILE
        text = _read(path)
        if text is None:
            continue
        skill = parse(text, default_name=folder.name, source=str(path.relative_to(working_dir)))
        if skill.name in seen or skill.name == AGENTS_FILE:
            logger.warning("skill %r in %s repeats a name; ignored", skill.name, path)
            continue
        seen.add(skill.name)
        out.append(skill)
    return out


def _read(path: Path) -> str | None:
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        logger.warning("cannot read %s: %s", path, exc)
        return None
    text = data[:MAX_FILE_BYTES].decode("utf-8", "replace")
    if len(data) > MAX_FILE_BYTES:
        text += (
            f"\n\n[... cut: only the first {MAX_FILE_BYTES // 1024} KiB of {path.name} are read]"
        )
    return text


def parse(text: str, default_name: str, source: str) -> Skill:
    """A SKILL.md: its front matter and body (no front matter: all body, named by its folder)."""
    meta, body = front_matter(text)
    name = _one_line(meta.get("name")) or default_name
    description = _one_line(meta.get("description"))
    if not description:  # the first line of prose stands in
        description = next((ln.strip("# ").strip() for ln in body.splitlines() if ln.strip()), "")
    triggers = meta.get("triggers", [])
    if isinstance(triggers, str):
        triggers = [triggers]
    clean = [str(t).strip()[:MAX_TRIGGER_LENGTH] for t in triggers if str(t).strip()]
    return Skill(
        name=name[:100],
        description=description[:MAX_DESCRIPTION],
        body=body.strip(),
        source=source,
        triggers=tuple(clean[:MAX_TRIGGERS]),
    )


def _one_line(value: Any) -> str:
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    return " ".join(str(value).split()) if value is not None else ""


FENCE = re.compile(r"^---[ \t]*$", re.M)


def front_matter(text: str) -> tuple[dict[str, Any], str]:
    """(fields, body) of a Markdown file that may start with `---` front matter."""
    text = text.lstrip("\ufeff")
    if not text.startswith("---"):
        return {}, text
    first = FENCE.match(text)
    end = FENCE.search(text, first.end()) if first else None
    if first is None or end is None:
        return {}, text
    return _yaml_subset(text[first.end() : end.start()].splitlines()), text[end.end() :]


def _yaml_subset(lines: Sequence[str]) -> dict[str, Any]:
    """Top-level `key: value` pairs; values are scalars, lists, or `|`/`>` blocks."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#") or line[:1].isspace():
            continue
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        key, rest = key.strip(), _strip_comment(rest.strip())
        block: list[str] = []
        while i < len(lines) and (
            not lines[i].strip() or lines[i][:1].isspace() or lines[i].startswith("- ")
        ):
            block.append(lines[i])
            i += 1
        if rest in ("|", ">", "|-", ">-", "|+", ">+"):
            parts = [b.strip() for b in block]
            out[key] = ("\n" if rest.startswith("|") else " ").join(parts).strip()
        elif rest:
            out[key] = _value(rest)
        elif any(b.strip().startswith("- ") or b.strip() == "-" for b in block):
            out[key] = [_value(b.strip()[1:].strip()) for b in block if b.strip().startswith("-")]
        else:
            out[key] = " ".join(b.strip() for b in block if b.strip())
    return out


def _strip_comment(value: str) -> str:
    if value[:1] in "\"'":
        return value
    return re.split(r"\s+#", value, maxsplit=1)[0].strip()


def _value(raw: str) -> Any:
    raw = raw.strip()
    if raw.startswith("[") and raw.endswith("]"):
        return [_scalar(p) for p in _split_flow(raw[1:-1]) if p.strip()]
    return _scalar(raw)


def _split_flow(inner: str) -> Iterable[str]:
    """`a, "b, c", 'd'` -> the three items (commas inside quotes stay)."""
    return [m.group(0) for m in re.finditer(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^']|'')*'|[^,]+", inner)]


def _scalar(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1].replace("''", "'")
    return raw


# -- what the model is given ----------------------------------------------------------------


def prompt_section(skills: Sequence[Skill]) -> str:
    """The skills part of the dynamic context: AGENTS.md whole, the others by description."""
    parts = []
    for skill in skills:
        if skill.always_on:
            parts.append(
                f'<repository_instructions source="{skill.source}">\n{skill.body}\n'
                "</repository_instructions>"
            )
    listed = [s for s in skills if not s.always_on]
    if listed:
        lines = [
            "<skills>",
            "Skills of this workspace. Before a task one of them covers, call invoke_skill "
            "with its name to read it in full.",
        ]
        for skill in listed:
            line = f"- {skill.name}: {skill.description}"
            if skill.triggers:
                line += f" (triggers: {', '.join(skill.triggers)})"
            lines.append(line)
        lines.append("</skills>")
        parts.append("\n".join(lines))
    return "\n".join(parts)


def activation_text(skill: Skill, trigger: str) -> TextContent:
    """What a message that activated `skill` carries to the model besides its own text."""
    return TextContent(
        text=(
            f'<EXTRA_INFO skill="{skill.name}">\n'
            f'The skill "{skill.name}" was activated by the keyword "{trigger}" in this message. '
            "It may or may not be relevant to the request.\n\n"
            f"{skill.body}\n</EXTRA_INFO>"
        )
    )


__all__ = [
    "Skill",
    "SkillBook",
    "SkillInfo",
    "SkillList",
    "activation_text",
    "front_matter",
    "load",
    "parse",
    "prompt_section",
]
