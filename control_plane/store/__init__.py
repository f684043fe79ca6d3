"""SQL storage of the control plane: tables, migrations, and one query module per resource."""

from control_plane.store.db import Database

__all__ = ["Database"]
