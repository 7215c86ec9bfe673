"""Unit tests are pure: any attempt to reach the network fails the test at once."""

from __future__ import annotations

import socket
from typing import Any

import pytest


class NetworkBlocked(RuntimeError):
    """A unit test tried to use the network."""


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise NetworkBlocked(f"unit tests must not touch the network (called with {args!r})")


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", _refuse)
    monkeypatch.setattr(socket, "getaddrinfo", _refuse)
    monkeypatch.setattr(socket, "create_connection", _refuse)
