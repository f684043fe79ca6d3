"""Process sandboxes: processes of this host, held by bubblewrap (or gVisor), cgroups and a
network namespace, started by a fork of a loaded template."""
