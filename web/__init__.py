"""The web kit both services stand on: one error tree and its handler (HTTP and websockets),
strict body and query readers, `reply` and `doc`, the OpenAPI builder, configuration from a
model's fields, and log records a client cannot forge.

A leaf beside `core`: it imports Starlette, pydantic and `core`, nothing of either service.
"""
