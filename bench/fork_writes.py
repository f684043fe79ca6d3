"""Which of the sandbox template's pages a forked server writes, and what lives on them (prints
JSON).

    .venv/bin/python bench/fork_writes.py [--fill]

What a forked sandbox holds of its own (its USS, `bench/density.py`) is nearly all pages of the
template it wrote to, each copied on its first write. This loads what the template loads
(`agent_server.template.preload`: the imports, litellm, the model calls and conversation
rehearsed, the collector frozen), then forks twice: a snapshot that only waits, and a worker
that does what a new server does first (a conversation created through a server's app, model
calls against a canned endpoint, a conversation again: `agent_server.rehearsal`). Comparing the
two page by page (/proc/<pid>/pagemap, as root) gives the worker's written pages (its copy's
frame differs from the snapshot's) and its new ones (no page there in the snapshot); each
written page is then named by the Python objects this process had on it before the forks
(`gc.get_objects()` and what they refer to, by address).

`--fill` first fills the free blocks of pymalloc's partly used pools in the template (so that
the worker's small allocations land in new pools rather than in the template's pages): it was
measured at 0.5 MiB less per sandbox, not worth keeping.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import re
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_server import rehearsal, template  # noqa: E402

PAGE = 4096
PRESENT = 1 << 63
FRAME = (1 << 55) - 1


def anonymous_pages(pid: int) -> dict[int, int]:
    """Each present page of `pid`'s heap and anonymous mappings: its address -> its frame."""
    found: dict[int, int] = {}
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            parts = line.split()
            if len(parts) > 5 and parts[5] != "[heap]":
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            pagemap.seek(start // PAGE * 8)
            data = pagemap.read((end - start) // PAGE * 8)
            for i, entry in enumerate(struct.unpack(f"{len(data) // 8}Q", data)):
                if entry & PRESENT:
                    found[start + i * PAGE] = entry & FRAME
    return found


def objects_by_page() -> dict[int, collections.Counter[str]]:
    """The types of this process's objects on each page (the collector's, and the untracked
    ones they refer to: strings, numbers, code)."""
    gc.unfreeze()
    seen: dict[int, Any] = {id(o): o for o in gc.get_objects()}
    todo = list(seen.values())
    while todo:
        for referent in gc.get_referents(todo.pop()):
            if id(referent) not in seen:
                seen[id(referent)] = referent
                if not gc.is_tracked(referent):
                    todo.append(referent)
    pages: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for address, obj in seen.items():
        pages[address & ~(PAGE - 1)][type(obj).__name__] += 1
    return pages


#: What `fill_pools` allocated, kept for the process's life.
KEPT: list[object] = []


def block_of(size: int) -> object:
    """A new object of exactly `size` bytes of pymalloc's (an object, a float, bytes)."""
    if size == 16:
        return object()
    if size == 32:
        return float(len(KEPT)) + 0.5
    return bytes(size - 33)  # a bytes object is 33 bytes and its length


def fill_pools() -> int:
    """Every free block of pymalloc's partly used pools taken by an object kept for good (as
    `sys._debugmallocstats` counts them per size class); how many."""
    for _ in range(3):  # what the filling itself allocates leaves a few more
        with tempfile.TemporaryFile() as out:
            saved = os.dup(2)
            try:
                sys.stderr.flush()
                os.dup2(out.fileno(), 2)
                sys._debugmallocstats()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            out.seek(0)
            text = out.read().decode()
        for size, free in re.findall(r"^\s+\d+\s+(\d+)\s+\d+\s+\d+\s+(\d+)$", text, re.M):
            KEPT.extend(block_of(int(size)) for _ in range(int(free)))
    return len(KEPT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fill", action="store_true", help="fill the pools' free blocks first")
    args = parser.parse_args()
    template.preload()
    filled = fill_pools() if args.fill else 0
    go, done = os.pipe(), os.pipe()
    snapshot = os.fork()
    if snapshot == 0:
        os.read(go[0], 1)
        os._exit(0)
    worker = os.fork()
    if worker == 0:
        rehearsal.first_conversation()
        rehearsal.warm_up()
        rehearsal.first_conversation()
        os.write(done[1], b"x")
        os.read(go[0], 1)
        os._exit(0)
    os.read(done[0], 1)
    before, after = anonymous_pages(snapshot), anonymous_pages(worker)
    written = {page for page, frame in after.items() if page in before and before[page] != frame}
    new = [page for page in after if page not in before]
    os.write(go[1], b"xx")
    for pid in (snapshot, worker):
        os.waitpid(pid, 0)
    pages = objects_by_page()
    on_written: collections.Counter[str] = collections.Counter()
    everywhere: collections.Counter[str] = collections.Counter()
    leading: collections.Counter[str] = collections.Counter()
    for page, kinds in pages.items():
        everywhere.update(kinds)
        if page in written:
            on_written.update(kinds)
    for page in written:
        found = pages.get(page)
        leading[found.most_common(1)[0][0] if found else "(no object found)"] += 1
    print(
        json.dumps(
            {
                "filled_blocks": filled,
                "template_pages_mib": round(len(before) * PAGE / 2**20, 1),
                "written_mib": round(len(written) * PAGE / 2**20, 1),
                "new_mib": round(len(new) * PAGE / 2**20, 1),
                "written_pages_by_leading_type": dict(leading.most_common(12)),
                "objects_on_written_pages_share": {
                    name: round(count / everywhere[name], 2)
                    for name, count in on_written.most_common(12)
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
