"""JSON answers as the client's dataclasses, read from their type hints: a dataclass from an
object (fields it does not know are ignored, a missing optional one takes its default), a list
or a dict of anything, ``X | None``, a time from its RFC 3339 text, numbers, text and booleans
checked to be what they say."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")


class NotTheDocumentedShape(ValueError):
    """A value is not what its type says; the message names where."""


def decode(kind: type[T], value: Any) -> T:
    """``value`` (decoded JSON) as ``kind``, a dataclass of ``tidings.client.models``."""
    return typing.cast(T, _decode(kind, value, kind.__name__))


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _decode(kind: Any, value: Any, where: str) -> Any:  # noqa: PLR0911, PLR0912 - one per kind
    if kind is Any:
        return value
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):
        if value is None:
            if type(None) not in typing.get_args(kind):
                raise NotTheDocumentedShape(f"{where} is null")
            return None
        (inner,) = [arm for arm in typing.get_args(kind) if arm is not type(None)]
        return _decode(inner, value, where)
    if origin is list:
        (item,) = typing.get_args(kind)
        return [_decode(item, v, f"{where}[{i}]") for i, v in enumerate(_of(list, value, where))]
    if origin is dict:
        _, item = typing.get_args(kind)
        return {
            str(k): _decode(item, v, f"{where}.{k}") for k, v in _of(dict, value, where).items()
        }
    if dataclasses.is_dataclass(kind):
        return _dataclass(kind, _of(dict, value, where), where)
    if kind is datetime:
        try:
            moment = datetime.fromisoformat(_of(str, value, where))
        except ValueError:
            raise NotTheDocumentedShape(f"{where} is not a time: {value!r}") from None
        if moment.tzinfo is None:
            raise NotTheDocumentedShape(f"{where} has no time zone: {value!r}")
        return moment
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise NotTheDocumentedShape(f"{where} is not a number: {value!r}")
        return float(value)
    if kind is int and isinstance(value, bool):
        raise NotTheDocumentedShape(f"{where} is not a whole number: {value!r}")
    return _of(kind, value, where)


def _dataclass(kind: Any, value: dict[str, Any], where: str) -> Any:
    hints = _hints(kind)
    found: dict[str, Any] = {}
    for field in dataclasses.fields(kind):
        if field.name in value:
            found[field.name] = _decode(
                hints[field.name], value[field.name], f"{where}.{field.name}"
            )
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise NotTheDocumentedShape(f"{where} has no {field.name}")
    return kind(**found)


def _of(kind: type[T], value: Any, where: str) -> T:
    if not isinstance(value, kind):
        raise NotTheDocumentedShape(f"{where} is not {kind.__name__}: {type(value).__name__}")
    return value
