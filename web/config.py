"""A service's configuration from a pydantic model's fields: one variable and one flag per field.

The model is the only list of settings: each field is set by the variable `PREFIX + NAME`
(`CONTROL_PLANE_PORT`) and the flag `--name` (`--port`), a flag winning over its variable;
its docstring is the flag's help. A field of a nested model (the agent server's delivery
limits) is set the same way, by its own name. `Env` in a field's `Annotated` metadata names
another variable, or none (a field the service computes itself). This is the only place the
environment is read.
"""

from __future__ import annotations

import argparse
import os
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel
from pydantic.fields import FieldInfo

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Env:
    """Field metadata: the variable that sets the field instead of PREFIX + NAME; None for a
    field no variable or flag sets."""

    variable: str | None
    flag: bool = True


@dataclass(frozen=True)
class Setting:
    """One field, as the environment and the command line name it."""

    path: tuple[str, ...]
    """Field names from the model down (two for a nested model's field)."""
    variable: str
    flag: str | None
    field: FieldInfo

    @property
    def dest(self) -> str:
        return "__".join(self.path)


def _nested(annotation: Any) -> type[BaseModel] | None:
    return (
        annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    )


def settings(model: type[BaseModel], prefix: str) -> Iterator[Setting]:
    """Every field of `model` that a variable sets, nested models' fields included."""
    for name, field in model.model_fields.items():
        nested = _nested(field.annotation)
        if nested is not None:
            for inner in settings(nested, prefix):
                yield Setting((name, *inner.path), inner.variable, inner.flag, inner.field)
            continue
        env = next((m for m in field.metadata if isinstance(m, Env)), None)
        if env is not None and env.variable is None:
            continue
        variable = env.variable if env is not None and env.variable else prefix + name.upper()
        flag = "--" + name.replace("_", "-") if env is None or env.flag else None
        yield Setting((name,), variable, flag, field)


def variables(model: type[BaseModel], prefix: str) -> dict[str, str]:
    """Field (dotted for a nested one) -> its variable, for documentation and tests."""
    return {".".join(s.path): s.variable for s in settings(model, prefix)}


def from_env(
    model: type[M],
    prefix: str,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    **values: Any,
) -> M:
    """The model from variables, then flags given (not None) on top, then `values` (what the
    service computed itself). Empty variables count as unset. Raises pydantic's
    ValidationError, naming the field."""
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    for setting in settings(model, prefix):
        value = (flags or {}).get(setting.dest)
        if value is None:
            value = env.get(setting.variable) or None
        if value is None:
            continue
        node = data
        for part in setting.path[:-1]:
            node = node.setdefault(part, {})
        node[setting.path[-1]] = value
    data.update({k: v for k, v in values.items() if v is not None})
    return model.model_validate(data)


def _scalar(annotation: Any) -> Any:
    """The one type a flag's text becomes, or None when no flag can say the value."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _scalar(args[0]) if len(args) == 1 else None
    if typing.get_origin(annotation) is typing.Annotated:
        return _scalar(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) is Literal or annotation in (int, float, str, bool, Path):
        return annotation
    return None


def add_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    model: type[BaseModel],
    prefix: str,
    skip: tuple[str, ...] = (),
) -> None:
    """A flag per field (`--name`, its docstring as help, the variable named)."""
    for setting in settings(model, prefix):
        kind = _scalar(setting.field.annotation)
        if setting.flag is None or kind is None or setting.dest in skip:
            continue
        help_ = f"{(setting.field.description or '').strip()} ({setting.variable})"
        help_ = help_.replace("%", "%%")
        if kind is bool:
            parser.add_argument(
                setting.flag,
                dest=setting.dest,
                default=None,
                help=help_,
                action=argparse.BooleanOptionalAction,
            )
        elif typing.get_origin(kind) is Literal:
            parser.add_argument(
                setting.flag,
                dest=setting.dest,
                default=None,
                help=help_,
                choices=[str(c) for c in typing.get_args(kind)],
            )
        else:
            parser.add_argument(
                setting.flag,
                dest=setting.dest,
                default=None,
                help=help_,
                type=kind if kind in (int, float) else str,
            )


def flags(args: argparse.Namespace, model: type[BaseModel], prefix: str) -> dict[str, Any]:
    """The flags `add_flags` declared, as `from_env` takes them."""
    return {s.dest: getattr(args, s.dest, None) for s in settings(model, prefix)}
