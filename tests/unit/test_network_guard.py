"""The guard in conftest.py really blocks the network."""

from __future__ import annotations

import socket

import pytest

BLOCKED = "unit tests must not touch the network"


def test_getaddrinfo_is_refused() -> None:
    with pytest.raises(RuntimeError, match=BLOCKED):
        socket.getaddrinfo("example.com", 443)


def test_connect_is_refused() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(RuntimeError, match=BLOCKED),
    ):
        sock.connect(("127.0.0.1", 9))


def test_create_connection_is_refused() -> None:
    with pytest.raises(RuntimeError, match=BLOCKED):
        socket.create_connection(("127.0.0.1", 9))
