"""Infrastructure shared by the agent server, its tools, the control plane and the bridge.

    core/
      files.py          atomic file replacement, small JSON files, confined opens
      ids.py            event ids (ULID), environment names, ${NAME} placeholders
      masking.py        secrets kept out of text (Masker) and out of responses (redact)
      namespaces.py     a sandbox's namespaces as bubblewrap made them
      net.py            whether a listener is reachable from other hosts
      observability.py  SPEC 2.5's observability fields, one set of rules
      paths.py          paths confined to a root directory
      processes.py      child environments, bounded runs, killing a whole process tree
      procfs.py         what /proc says of processes: groups, children, a run's processes
      retry.py          Clock, Backoff, Retry-After
      signing.py        Standard Webhooks signatures

The rule: `core` is a leaf. It imports the standard library, pydantic and python-ulid, and
nothing else of the project, so any package can import it without a cycle. Import the
submodules (`from core.masking import Masker`); this package re-exports nothing, so importing
one does not load the others.
"""

__all__ = [
    "files",
    "ids",
    "masking",
    "namespaces",
    "net",
    "observability",
    "paths",
    "processes",
    "procfs",
    "retry",
    "signing",
]
