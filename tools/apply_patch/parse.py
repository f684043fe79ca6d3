"""The text of an `apply_patch` call -> the file operations it asks for.

The format is OpenAI's (the GPT-4.1/GPT-5 prompting guides and codex):

    *** Begin Patch
    *** Add File: path        then every line of the new file, each prefixed with +
    *** Delete File: path
    *** Update File: path
    *** Move to: new/path     (optional, right after Update File)
    @@ class Foo              a hunk; the text after @@ (optional) is a line to find first
     context line             (space) kept
    -removed line
    +added line
    *** End of File           (optional) the hunk must match at the end of the file
    *** End Patch

Parsing only reads the text; nothing here touches a file. Mistakes are PatchError with the
line of the patch they are on, so the model can fix that line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"
HUNK = "@@"


class PatchError(Exception):
    """The patch cannot be applied; `str()` is what the model reads."""


@dataclass
class Hunk:
    """One @@ section of an Update File."""

    #: 1-based, in order within its file (for error messages).
    number: int
    #: The line of the patch the hunk starts on (1-based).
    patch_line: int
    #: The text after `@@ `, a line to find before matching the hunk (None when bare).
    context: str | None
    #: The lines the file has now (context and removed lines, in order).
    old: list[str] = field(default_factory=list)
    #: The lines it should have instead (context and added lines, in order).
    new: list[str] = field(default_factory=list)
    #: `*** End of File` followed: the old lines must be the file's last ones.
    at_end: bool = False


@dataclass
class AddFile:
    path: str
    text: str


@dataclass
class DeleteFile:
    path: str


@dataclass
class UpdateFile:
    path: str
    move_to: str | None
    hunks: list[Hunk]


FileOp = AddFile | DeleteFile | UpdateFile


def parse(patch: str) -> list[FileOp]:
    """Every file operation of the patch, in order; PatchError on a malformed patch."""
    lines = patch.replace("\r\n", "\n").split("\n")
    # Blank lines around the patch (and a trailing newline) are not part of it.
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise PatchError("The patch is empty; it must start with '*** Begin Patch'.")
    last = max(i for i, line in enumerate(lines) if line.strip())
    if lines[first].strip() != BEGIN:
        raise PatchError(
            f"The patch must start with '{BEGIN}' (line {first + 1} is {_quote(lines[first])})."
        )
    if lines[last].strip() != END:
        raise PatchError(
            f"The patch must end with '{END}' (the last line is {_quote(lines[last])})."
        )
    return _Reader(lines, first + 1, last).ops()


class _Reader:
    """Reads the lines between Begin and End Patch."""

    def __init__(self, lines: list[str], start: int, stop: int) -> None:
        self.lines = lines
        self.at = start
        self.stop = stop

    def ops(self) -> list[FileOp]:
        ops: list[FileOp] = []
        while self.at < self.stop:
            line = self.lines[self.at]
            if not line.strip():
                self.at += 1
            elif line.startswith(ADD):
                ops.append(self._add(self._path(line, ADD)))
            elif line.startswith(DELETE):
                ops.append(DeleteFile(self._path(line, DELETE)))
                self.at += 1
            elif line.startswith(UPDATE):
                ops.append(self._update(self._path(line, UPDATE)))
            else:
                raise PatchError(
                    f"Line {self.at + 1} of the patch is {_quote(line)}; expected "
                    f"'{ADD}', '{DELETE}' or '{UPDATE}' followed by a path."
                )
        if not ops:
            raise PatchError("The patch changes no file.")
        return ops

    def _path(self, line: str, prefix: str) -> str:
        path = line[len(prefix) :].strip()
        if not path:
            raise PatchError(
                f"Line {self.at + 1} of the patch names no file after '{prefix.strip()}'."
            )
        return path

    def _is_header(self, line: str) -> bool:
        return line.startswith((ADD, DELETE, UPDATE)) or line.strip() == END

    def _add(self, path: str) -> AddFile:
        self.at += 1
        body: list[str] = []
        while self.at < self.stop and not self._is_header(self.lines[self.at]):
            line = self.lines[self.at]
            if not line.startswith("+"):
                raise PatchError(
                    f"Line {self.at + 1} of the patch ({_quote(line)}), in Add File {path}: "
                    "every line of an added file starts with '+'."
                )
            body.append(line[1:])
            self.at += 1
        return AddFile(path, "".join(f"{line}\n" for line in body))

    def _update(self, path: str) -> UpdateFile:
        self.at += 1
        move_to = None
        if self.at < self.stop and self.lines[self.at].startswith(MOVE):
            move_to = self._path(self.lines[self.at], MOVE)
            self.at += 1
        hunks: list[Hunk] = []
        while self.at < self.stop and not self._is_header(self.lines[self.at]):
            hunks.append(self._hunk(path, len(hunks) + 1, first=not hunks))
        if not hunks and move_to is None:
            raise PatchError(f"Update File {path} (line {self.at} of the patch) has no hunk.")
        return UpdateFile(path, move_to, hunks)

    def _hunk(self, path: str, number: int, first: bool) -> Hunk:
        line = self.lines[self.at]
        hunk = Hunk(number=number, patch_line=self.at + 1, context=None)
        if line.startswith(HUNK):
            hunk.context = line[len(HUNK) :].strip() or None
            self.at += 1
        elif not first:  # only the first hunk may leave out its @@ line
            raise PatchError(
                f"Line {self.at + 1} of the patch ({_quote(line)}), in Update "
                f"File {path}: expected '@@' to start hunk {number}."
            )
        while self.at < self.stop:
            line = self.lines[self.at]
            if self._is_header(line) or line.startswith(HUNK):
                break
            if line.strip() == END_OF_FILE:
                hunk.at_end = True
                self.at += 1
                break
            self._body_line(hunk, line, path)
            self.at += 1
        if not hunk.old and not hunk.new:
            raise PatchError(
                f"Hunk {number} of Update File {path} (line {hunk.patch_line} of "
                "the patch) is empty."
            )
        return hunk

    def _body_line(self, hunk: Hunk, line: str, path: str) -> None:
        sign, text = line[:1], line[1:]
        if sign == " " or line == "":  # a blank context line often loses its space
            hunk.old.append(text)
            hunk.new.append(text)
        elif sign == "-":
            hunk.old.append(text)
        elif sign == "+":
            hunk.new.append(text)
        else:
            raise PatchError(
                f"Line {self.at + 1} of the patch ({_quote(line)}), in hunk {hunk.number} of "
                f"Update File {path}: a hunk line starts with ' ' (context), '-' (remove) or "
                "'+' (add)."
            )


def _quote(line: str, limit: int = 80) -> str:
    return repr(line if len(line) <= limit else line[:limit] + "...")


__all__ = ["AddFile", "DeleteFile", "FileOp", "Hunk", "PatchError", "UpdateFile", "parse"]
