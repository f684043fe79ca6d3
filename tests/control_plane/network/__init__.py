"""Tests of the sandboxes' network boundary (control_plane/network)."""
