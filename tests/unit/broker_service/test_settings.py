"""Settings: environment < config file < flags, and every setting is a serve flag."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from broker_service.domain.config import parse_delay_levels
from broker_service.settings import BrokerSettings, load_settings
from halfmq.cli import app


def test_flag_beats_file_beats_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALFMQ_PORT", "1111")
    monkeypatch.setenv("HALFMQ_TRANSACTION_CHECK_MAX", "3")
    monkeypatch.setenv("HALFMQ_FLUSH", "async")
    config = tmp_path / "broker.yaml"
    config.write_text("port: 2222\ntransaction-check-max: 7\n")
    settings = load_settings(config, {"port": 3333})
    assert settings.port == 3333  # flag
    assert settings.transaction_check_max == 7  # file over environment
    assert settings.flush == "async"  # environment when nothing else says


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("b.toml", "[halfmq]\nport = 4444\n"),
        ("b.json", '{"port": 4444}'),
        ("b.yml", "port: 4444\n"),
    ],
)
def test_config_file_formats(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert load_settings(path).port == 4444


def test_bad_values_are_refused() -> None:
    with pytest.raises(ValidationError):
        BrokerSettings(port=70000)
    with pytest.raises(ValidationError):
        BrokerSettings(message_delay_level="1s 5x")
    with pytest.raises(ValidationError):
        BrokerSettings(not_a_setting=1)  # type: ignore[call-arg]


def test_delay_levels_parse_rocketmq_strings() -> None:
    assert parse_delay_levels("1s 5s 10s 30s 1m 2m 1h 2h")[-2:] == (3_600_000, 7_200_000)
    assert parse_delay_levels("250ms 1.5s") == (250, 1500)


def test_every_setting_is_a_serve_flag() -> None:
    result = CliRunner().invoke(app, ["broker", "serve", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    for name in BrokerSettings.model_fields:
        assert "--" + name.replace("_", "-") in result.output, name


def test_serve_refuses_bad_settings_with_a_message(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["broker", "serve", "--port", "99999"])
    assert result.exit_code == 2
    assert "invalid settings" in result.output


@pytest.mark.parametrize("enabled", [False, True])
def test_fastapi_native_opentelemetry_follows_the_setting(tmp_path: Path, enabled: bool) -> None:
    from broker_service.app import build_app

    settings = BrokerSettings(database_url=f"sqlite:///{tmp_path / 'b.db'}", opentelemetry=enabled)
    telemetry = build_app(settings)._telemetry  # FastAPI's own config of its native telemetry
    assert (telemetry["tracing"], telemetry["metrics"], telemetry["logs"]) == (enabled,) * 3
