"""The ports endpoints may use: the deployment's sender can open these and no others."""

from __future__ import annotations

import pytest

from tidings.config import ConfigError, Settings, port_ranges


def test_by_default_only_http_and_https_ports_are_allowed() -> None:
    settings = Settings()
    assert settings.endpoint_ports == ("80", "443")
    assert [p for p in (22, 80, 443, 6379, 8080, 8443) if settings.allows_port(p)] == [80, 443]


def test_ports_and_ranges_come_from_the_environment() -> None:
    settings = Settings.from_env({"TIDINGS_ENDPOINT_PORTS": "443, 8000-8999"})
    assert settings.endpoint_ports == ("443", "8000-8999")
    assert port_ranges(settings.endpoint_ports) == ((443, 443), (8000, 8999))
    assert settings.allows_port(8000) and settings.allows_port(8999)
    assert not settings.allows_port(80) and not settings.allows_port(9000)


@pytest.mark.parametrize("value", ["", ",", "http", "0", "65536", "9000-8000", "80-", "-80", "1.5"])
def test_a_setting_that_is_not_ports_stops_the_start(value: str) -> None:
    with pytest.raises(ConfigError, match="TIDINGS_ENDPOINT_PORTS"):
        Settings.from_env({"TIDINGS_ENDPOINT_PORTS": value})
