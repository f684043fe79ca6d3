"""Secrets moved to `core.masking` (values, masks, checks) and `core.ids` (their names).

A value never reaches the event log, a websocket, the webhook or the model: every event is
masked as it is written (see EventLog.redactor), and nothing else carries event text.
"""

# re-export for modules not yet moved to core
from core.ids import ENV_NAME as NAME
from core.masking import MASK, MIN_LENGTH, Masker, StreamMasker, check_secrets

__all__ = ["MASK", "MIN_LENGTH", "NAME", "Masker", "StreamMasker", "check_secrets"]
