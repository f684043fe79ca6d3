"""Route handlers, one module per resource; the route table itself is in `control_plane.app`."""
