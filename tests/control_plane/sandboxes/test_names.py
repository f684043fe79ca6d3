"""Sandboxes have readable names (issue 39 item 7): generated at creation, unique among the
user's sandboxes, renamed by `PATCH /api/v1/sandboxes/{id}` `name`, and on the record beside the
id (which stays the key of every route)."""

from __future__ import annotations

import random
import re

from control_plane.sandboxes import names
from tests.control_plane.support import ControlPlane

FORM = re.compile(r"[a-z]+-[a-z]+-\d{2}")


def test_a_generated_name_avoids_the_taken_ones() -> None:
    rng = random.Random(7)
    taken: set[str] = set()
    for _ in range(2000):
        name = names.generate(taken, rng)
        assert name.lower() not in taken and re.fullmatch(names.NAME_PATTERN, name)
        taken.add(name)
    # Every two-digit name of the lists taken: a longer number follows.
    every = {f"{a}-{n}-{d}" for a in names.ADJECTIVES for n in names.NOUNS for d in range(10, 100)}
    assert re.fullmatch(r"[a-z]+-[a-z]+-\d{3}", names.generate(every, rng))


def test_sandboxes_are_named_and_renamed(control_plane: ControlPlane) -> None:
    alice = control_plane.client(control_plane.new_user("alice"))
    bob = control_plane.client(control_plane.new_user("bob"))
    made = [alice.post("/api/v1/sandboxes", json={}).json() for _ in range(2)]
    first, second = made
    assert all(FORM.fullmatch(s["name"]) for s in made) and first["name"] != second["name"]
    listed = alice.get("/api/v1/sandboxes/search").json()["items"]
    assert {s["id"]: s["name"] for s in listed} == {s["id"]: s["name"] for s in made}
    path = f"/api/v1/sandboxes/{first['id']}"

    # Renamed; the id stays what routes take.
    r = alice.patch(path, json={"name": "Build box 1"})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "Build box 1" and r.json()["id"] == first["id"]
    assert alice.get("/api/v1/sandboxes", params={"id": first["id"]}).json()[0]["name"] == (
        "Build box 1"
    )
    # Another of the user's names (in any case) is refused, and nothing changes.
    r = alice.patch(f"/api/v1/sandboxes/{second['id']}", json={"name": "build BOX 1"})
    assert r.status_code == 409, r.text
    assert (
        alice.get("/api/v1/sandboxes", params={"id": second["id"]}).json()[0]["name"]
        == (second["name"])
    )
    # A name is letters, digits, spaces, '.', '-' and '_', between letters or digits: SPEC 7's
    # 422 at the field otherwise.
    for bad in ("", " padded", "a" * 65, "<b>x</b>", "tab\there", "dash-"):
        r = alice.patch(path, json={"name": bad})
        assert r.status_code == 422, bad
        assert r.json()["detail"][0]["loc"] == ["body", "name"]
    assert alice.patch(path, json={"name": None}).json()["name"] == "Build box 1"  # kept
    # Another user may have the same name; another user's sandbox is not found.
    bobs = bob.post("/api/v1/sandboxes", json={}).json()
    r = bob.patch(f"/api/v1/sandboxes/{bobs['id']}", json={"name": "Build box 1"})
    assert r.status_code == 200, r.text
    assert bob.patch(path, json={"name": "mine now"}).status_code == 404
