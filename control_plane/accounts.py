"""Accounts: users and their API keys (SPEC 5). Only a key's hash is stored, so a key is shown
once, when it is made (`control-plane keys create`)."""

from __future__ import annotations

from control_plane.crypto import hash_key, new_key
from control_plane.models import User
from control_plane.store import Database, accounts
from control_plane.store.accounts import StoredKey


def user_name(name: str) -> str:
    """A user name as stored (1 to 200 characters, outer blanks dropped); ValueError else."""
    if not name.strip() or len(name) > 200:
        raise ValueError("user names are 1 to 200 characters")
    return name.strip()


class Accounts:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def by_key(self, key: str) -> User | None:
        """The user an API key belongs to; None for an unknown key."""
        return await accounts.user_by_key_hash(self.db, hash_key(key))

    async def create_key(self, name: str) -> str:
        """A new key for the user `name` (made when new); ValueError for a bad name."""
        user = await accounts.get_or_create_user(self.db, user_name(name))
        key = new_key("cp")
        await accounts.add_key(self.db, user, hash_key(key))
        return key

    async def keys(self, user: str | None = None) -> list[StoredKey]:
        """Every key (or a user's): id, user, creation time."""
        return await accounts.list_keys(self.db, user)

    async def revoke(self, *, key_id: str | None = None, user: str | None = None) -> int:
        """Revoke one key, or all of a user's; how many. Refused from the next request on, by
        every control plane on the database (nothing caches a key)."""
        if (key_id is None) == (user is None):
            raise ValueError("name a key id or a user, not both")
        return await accounts.delete_keys(self.db, key_id=key_id, user=user)
