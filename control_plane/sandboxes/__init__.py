"""Sandboxes: the provider interface, the process provider, and the service that keeps rows and
processes in step."""
