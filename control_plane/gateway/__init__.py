"""The LLM gateway (issue 36): the user's LLM key never enters a sandbox this control plane
starts.

A sandbox's model client is given the gateway as its base URL (this control plane's address as
the sandbox reaches it, then `/api/v1/llm`) and a token of the sandbox's own as its API key
(`crypto.sandbox_token`). Each call it makes arrives here, and goes on to the user's LLM (their
`llm_base_url`, or the provider's default) with the token replaced by the user's real key, in
the same header or query parameter; the answer streams back as it comes. A prompt-injected
agent can read its token, but the token is worth nothing outside: it opens only this gateway,
only for the user's own model, within the user's limits, and dies with the sandbox.

- `credentials`: where the client put its token, whose it is, the key put in its place;
- `upstream`: where a call goes (base URL, defaults, the joined path) and where it must not;
- `proxy`: the forwarding itself, streamed both ways, hop-by-hop headers left out;
- `metering`: the tokens an answer used (JSON or server-sent events) and their price;
- `limits`: the daily budget and the requests per minute, checked before forwarding;
- `errors`: refusals in the error shape of the provider the client called;
- `service`: `Gateway`, the one service that strings them together and records the usage
  (`store.usage`, per user, sandbox and UTC day).
"""

from control_plane.gateway.credentials import GATEWAY_PATH, LLMAccess
from control_plane.gateway.service import MAX_BODY, Gateway

__all__ = ["GATEWAY_PATH", "MAX_BODY", "Gateway", "LLMAccess"]
