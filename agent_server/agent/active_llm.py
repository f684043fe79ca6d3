"""ActiveLLM: which LLM a conversation uses now, and the saved profiles it may switch to.

A conversation starts with the LLM of its agent. A switch (the agent's switch_llm tool, or
the user's route) names a saved profile (settings `llm_profiles`) or gives a whole LLM; it
holds from the next request on and is recorded as a ConversationStateUpdateEvent (key "llm",
never a key). While a profile is active the profile is read afresh for every request, so a
key rotated in the settings reaches every conversation using it; a conversation's own LLM has
its key rotated by its own route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

from pydantic import SecretStr

from agent_server.agent.spec import LLMConfig
from events import ConversationStateUpdateEvent
from tools.conversation import ProfileInfo, ProfileNotFound
from web.errors import Conflict

Profiles = Callable[[], Mapping[str, LLMConfig]]
Who = Literal["agent", "user"]


def profile_info(name: str, config: LLMConfig) -> ProfileInfo:
    return ProfileInfo(
        name=name, model=config.model, base_url=config.base_url, vision=config.vision
    )


class ActiveLLM:
    def __init__(
        self,
        stored: LLMConfig,
        profile: str | None,
        profiles: Profiles,
        on_change: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        #: The LLM in force; while a profile is active, a copy of it as last seen (used
        #: should the profile be removed from the settings).
        self.stored = stored
        self.profile = profile
        self.profiles = profiles
        #: Called after every change (the conversation saves its record).
        self._on_change = on_change

    @property
    def config(self) -> LLMConfig:
        """What the next request uses."""
        if self.profile is not None:
            found = self.profiles().get(self.profile)
            if found is not None:
                return found
        return self.stored

    def profile_config(self, name: str) -> LLMConfig:
        found = self.profiles().get(name)
        if found is None:
            raise ProfileNotFound(name)
        return found

    def saved(self) -> list[ProfileInfo]:
        return [profile_info(name, config) for name, config in sorted(self.profiles().items())]

    async def switch_profile(
        self, name: str, reason: str, who: Who
    ) -> ConversationStateUpdateEvent:
        """Use the saved profile from the next request on; raises ProfileNotFound."""
        config = self.profile_config(name)
        self.stored, self.profile = config, name
        return await self._changed(reason, who)

    async def switch_llm(
        self, config: LLMConfig, reason: str, who: Who
    ) -> ConversationStateUpdateEvent:
        """Use this LLM (no profile) from the next request on."""
        self.stored, self.profile = config, None
        return await self._changed(reason, who)

    async def rotate_key(self, key: str) -> ConversationStateUpdateEvent:
        """A new key for the conversation's own LLM (a profile's key is rotated in settings)."""
        if self.profile is not None:
            raise Conflict(
                f"The conversation uses the LLM profile {self.profile!r}: rotate its "
                "key in the settings (PATCH /api/settings llm_profiles), which "
                "reaches every conversation using it"
            )
        self.stored = self.stored.model_copy(update={"api_key": SecretStr(key)})
        return await self._changed("api key rotated", "user")

    async def _changed(self, reason: str, who: Who) -> ConversationStateUpdateEvent:
        if self._on_change is not None:
            await self._on_change()
        config = self.config
        return ConversationStateUpdateEvent(
            key="llm",
            value={
                "profile_name": self.profile,
                "model": config.model,
                "base_url": config.base_url,
                "reason": reason[:2000],
                "source": who,
            },
        )
