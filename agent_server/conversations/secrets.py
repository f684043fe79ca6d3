"""What a conversation keeps out of sight, and the masker that hides it in every event."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping

from agent_server.record import StoredConversation
from agent_server.settings import Settings
from core.masking import Masker, credentials


class Secrets:
    """The secret values in force (the settings', then the conversation's own): one live dict
    that tools and hooks read. Masked with them in every event, though no tool gets these:
    `hidden` (the server's own keys), the LLM keys (the agent's, its condenser's and critic's,
    the settings' profiles': an agent that comes by one and prints it leaves it nowhere) and
    the values the agent's spec holds literally (shown redacted)."""

    def __init__(self, hidden: Mapping[str, str] | None) -> None:
        self.values: dict[str, str] = {}
        self._held: dict[str, str] = {}
        self.masker = Masker(ChainMap(self.values, self._held, dict(hidden or {})))

    def refresh(self, settings: Settings, record: StoredConversation) -> None:
        """As the settings and the record hold them now (after a change to either, a new
        secret, a switch of the model)."""
        self.values.clear()
        self.values.update({**settings.secrets, **record.secrets})
        held = [*record.agent.literal_values(), *credentials(settings.llm_profiles)]
        self._held.clear()
        self._held.update({f"held {i}": value for i, value in enumerate(held)})
