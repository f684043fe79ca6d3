"""The conversations of this server: the catalogue and each conversation.

    catalogue.py     ConversationService: loaded at start, create, fork, search, delete
    conversation.py  Conversation: its record, log, status, run task and agent session
    parts.py         ConversationParts, what a Conversation is given: built by the catalogue
    files.py         its record's file (meta.json) and its event log, opened on first need
    secrets.py       what it keeps out of sight, and the masker that hides it
    cloning.py       its repository, cloned once (in the background, or before a run)
    presentation.py  what clients are shown of one (its info, its state updates)
    fanout.py        Fanout: where its events go besides the log (delivery implements it)

The execution status and its transition table are the wire contract's (`events.status`); the
one check of a move is `agent_server.status` (the agent reports a status too, and must not
import this package).
"""

from agent_server.conversations.catalogue import ConversationService
from agent_server.conversations.conversation import Conversation, Lifecycle
from agent_server.conversations.fanout import Fanout

__all__ = ["Conversation", "ConversationService", "Fanout", "Lifecycle"]
