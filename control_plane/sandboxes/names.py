"""Readable sandbox names ("brisk-otter-42"): what a person reads, says and confirms instead of
a 32-hex id.

A sandbox is given one when its row is made (`Starts.new_row`, under the user's lock, so the
names it avoids are all of the user's), unique among the user's sandboxes, and the user may
rename it (`PATCH /api/v1/sandboxes/{id}` `name`). The id stays the key of every route: a name
is for people, and two users' sandboxes may share one.
"""

from __future__ import annotations

import random
from collections.abc import Collection

#: What a chosen name may be: letters, digits, spaces, dots, hyphens and underscores, starting
#: and ending with a letter or a digit, 64 characters at most (shown in one line, never
#: mistaken for markup, the same in a URL's fragment and a log line).
NAME_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9 ._-]{0,62}[A-Za-z0-9])?$"
MAX_LENGTH = 64

ADJECTIVES = (
    "amber", "bold", "brave", "brisk", "calm", "clever", "cosy", "crisp", "daring", "eager",
    "fair", "fancy", "fresh", "gentle", "glad", "golden", "happy", "humble", "jolly", "keen",
    "kind", "lively", "lucky", "merry", "mighty", "misty", "nimble", "noble", "plucky", "proud",
    "quick", "quiet", "rapid", "rosy", "shiny", "silver", "steady", "sunny", "swift", "tidy",
    "witty", "zesty",
)  # fmt: skip
NOUNS = (
    "badger", "beacon", "birch", "comet", "coral", "crane", "delta", "ember", "falcon", "fern",
    "fjord", "fox", "garnet", "harbor", "heron", "island", "lantern", "lark", "maple", "meadow",
    "nebula", "oak", "orchid", "otter", "panda", "pebble", "pine", "quartz", "raven", "reef",
    "river", "robin", "sparrow", "spruce", "summit", "thistle", "tiger", "walrus", "willow",
    "wren",
)  # fmt: skip


def generate(taken: Collection[str], rng: random.Random | None = None) -> str:
    """A name of the form adjective-noun-NN that is not in `taken` (compared without case).

    Some 150,000 names: random picks find a free one at once for any number of sandboxes a
    user may have (50 live by default); a longer number follows, should the picks all meet
    taken ones."""
    pick = rng or random.SystemRandom()
    used = {name.lower() for name in taken}
    for digits in (2, 2, 2, 2, 3, 4, 6):
        for _ in range(25):
            name = (
                f"{pick.choice(ADJECTIVES)}-{pick.choice(NOUNS)}-"
                f"{pick.randrange(10 ** (digits - 1), 10**digits)}"
            )
            if name not in used:
                return name
    raise RuntimeError("no free sandbox name")  # (150,000 and more taken: never)
