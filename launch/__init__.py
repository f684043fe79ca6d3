"""How a sandbox's agent server is started: what the control plane and the server agree on.

Each side spelled these once for itself before; now both import them from here:

    launch/
      env.py     the launch environment (`LaunchEnv`): the AGENT_SERVER_* variables a launcher
                 sets, named by the rule the agent server's configuration reads them by
      keys.py    the keys handed over a pipe (`Keys`, `decode`): a JSON object of variables
      ready.py   "serving on this port" (`Ready`), on a pipe or in a file
      claim.py   a warm pool's one-time claim: the parked server's secret and the request

The rule: `launch` is a leaf beside `core`. It imports the standard library, pydantic and
`core`, nothing of the agent server or the control plane, so both can import it (and the
sandbox image, which holds no control plane, carries it).
"""

__all__ = ["claim", "env", "keys", "ready"]
