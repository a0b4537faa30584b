"""Configuration: defaults, environment over TOML file, every bad value reported in one message."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.worker.conftest import MEMLEDGER
from worker.config import ConfigError, child_environment, load_config
from worker.runtime import Runtime


def test_defaults_are_the_embedded_single_machine_service() -> None:
    config = load_config()
    assert config.database_url == "sqlite:///./memledger.db"
    assert config.redis_url is None and config.embedded
    assert config.account == "local"
    assert (config.log_format, config.log_level) == ("json", "INFO")
    assert config.metrics_port is None
    assert config.janitor_interval_s > 0 and config.worker_threads >= 1


def test_environment_beats_the_toml_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a TOML file and one environment variable naming the same setting
    toml = tmp_path / "memledger.toml"
    toml.write_text(
        'redis_url = "redis://127.0.0.1:6379/3"\nworker_threads = 3\nlog_level = "debug"\n'
        "[model_prices.my-model]\ninput = 1\noutput = 2\n"
    )
    monkeypatch.setenv("MEMLEDGER_CONFIG_FILE", str(toml))
    monkeypatch.setenv("MEMLEDGER_WORKER_THREADS", "5")
    # When the configuration is read
    config = load_config()
    # Then the environment wins, the file fills in the rest, and prices are merged into the table
    assert config.worker_threads == 5
    assert config.redis_url == "redis://127.0.0.1:6379/3" and not config.embedded
    assert config.log_level == "DEBUG"
    assert "my-model" in config.price_table()


def test_every_bad_value_is_reported_in_one_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text("janitor_interval_s = -1\nwokrer_threads = 2\n")
    monkeypatch.setenv("MEMLEDGER_CONFIG_FILE", str(toml))
    monkeypatch.setenv("MEMLEDGER_LOG_FORMAT", "xml")
    monkeypatch.setenv("MEMLEDGER_METRICS_PORT", "http")
    monkeypatch.setenv("MEMLEDGER_REDIS_URL", "http://127.0.0.1:6379")
    monkeypatch.setenv("MEMLEDGER_DATABASE_URL", "mysql://x/y")
    monkeypatch.setenv("MEMLEDGER_MODEL_PRICES", '{"new-model": {"input": 1}}')
    with pytest.raises(ConfigError) as info:
        load_config()
    message = str(info.value)
    assert message.startswith("invalid configuration (7 problems)")
    for expected in (
        "MEMLEDGER_LOG_FORMAT='xml'",
        "MEMLEDGER_METRICS_PORT='http'",
        "MEMLEDGER_REDIS_URL='http://127.0.0.1:6379'",
        "MEMLEDGER_DATABASE_URL='mysql://x/y'",
        "MEMLEDGER_MODEL_PRICES=",
        f"janitor_interval_s in {toml}",
        f"wokrer_threads in {toml}: unknown setting",
    ):
        assert expected in message


def test_missing_or_broken_toml_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_CONFIG_FILE", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config()
    broken = tmp_path / "broken.toml"
    broken.write_text("this is = = not toml")
    monkeypatch.setenv("MEMLEDGER_CONFIG_FILE", str(broken))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config()


def test_secrets_are_masked_in_the_redacted_view(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_DATABASE_URL", "postgresql+psycopg://app:s3cret@db:5432/m")
    monkeypatch.setenv("MEMLEDGER_REDIS_URL", "redis://:hunter2@redis:6379/0")
    shown = str(load_config().redacted())
    assert "s3cret" not in shown and "hunter2" not in shown


def test_the_command_line_reports_bad_configuration_without_a_traceback(base_env: dict[str, str]) -> None:
    env = {**base_env, "MEMLEDGER_WORKER_THREADS": "zero", "MEMLEDGER_LOG_LEVEL": "LOUD"}
    done = subprocess.run([MEMLEDGER, "runs"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "MEMLEDGER_WORKER_THREADS='zero'" in done.stderr and "MEMLEDGER_LOG_LEVEL='LOUD'" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_the_runtime_hands_the_model_keys_it_read_to_the_service(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "anthropic-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/anthropic")
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "")  # empty counts as unset

    service = make_runtime().service

    assert (service.connections.api_key, service.connections.base_url) == (
        "anthropic-key",
        "http://127.0.0.1:9/anthropic",
    )
    assert (service.connections.openai_api_key, service.connections.openai_base_url) == ("openai-key", None)


def test_the_consolidation_service_reads_no_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from consolidation import ConsolidationService
    from ledger import open_ledger

    monkeypatch.setenv("ANTHROPIC_API_KEY", "anthropic-key")
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key")
    led = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        service = ConsolidationService(led)
        assert (service.connections.api_key, service.connections.openai_api_key) == (None, None)
    finally:
        led.close()


def test_the_ledger_commands_take_database_and_account_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.cli.ledger import DEFAULT_DATABASE_URL, database_url_from_env, ledger_from_env

    assert database_url_from_env() == DEFAULT_DATABASE_URL
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    monkeypatch.setenv("MEMLEDGER_DATABASE_URL", url)
    monkeypatch.setenv("MEMLEDGER_ACCOUNT", "alice")
    monkeypatch.setenv("MEMLEDGER_LOG_LEVEL", "nonsense")  # the rest of the configuration is not theirs to check
    assert database_url_from_env() == url
    assert database_url_from_env("sqlite:///other.db") == "sqlite:///other.db"
    led = ledger_from_env()
    try:
        assert led.scope_key == "account:alice"
    finally:
        led.close()


def test_a_worker_process_starts_with_this_environment_and_the_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMLEDGER_ACCOUNT", "alice")

    env = child_environment(MEMLEDGER_DATABASE_URL="sqlite:///x.db", PROMETHEUS_MULTIPROC_DIR="/tmp/m")

    assert env["MEMLEDGER_ACCOUNT"] == "alice"
    assert (env["MEMLEDGER_DATABASE_URL"], env["PROMETHEUS_MULTIPROC_DIR"]) == ("sqlite:///x.db", "/tmp/m")


def test_the_serve_port_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_config().port == 8080
    monkeypatch.setenv("MEMLEDGER_PORT", "8081")
    assert load_config().port == 8081
    monkeypatch.setenv("MEMLEDGER_PORT", "70000")
    with pytest.raises(ConfigError, match="MEMLEDGER_PORT='70000'"):
        load_config()


def test_a_bad_secret_is_reported_without_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given settings that fail their checks while holding secrets: a short operator token, passwords in URLs
    monkeypatch.setenv("MEMLEDGER_OPERATOR_TOKEN", "hunter2-op")
    monkeypatch.setenv("MEMLEDGER_DATABASE_URL", "mysql://ledger:hunter2-db@db.example/ledger")
    monkeypatch.setenv("MEMLEDGER_REDIS_URL", "http://:hunter2-redis@redis.example:6379/0")
    # When the configuration is read
    with pytest.raises(ConfigError) as info:
        load_config()
    # Then each is named, URLs without their password, and no secret is in the message (it goes to the logs)
    message = str(info.value)
    assert "hunter2" not in message, message
    for expected in (
        "MEMLEDGER_OPERATOR_TOKEN='***': String should have at least 16 characters",
        "MEMLEDGER_DATABASE_URL='mysql://ledger:***@db.example/ledger'",
        "MEMLEDGER_REDIS_URL='http://:***@redis.example:6379/0'",
    ):
        assert expected in message, message


@pytest.mark.parametrize(
    "spelling",
    [
        {"memledger_database_url": "sqlite:///a.db", "Memledger_Account": "alice", "MEMLEDGER_SQLITE_SYNCHRONOUS": ""},
        {"MEMLEDGER_ACCOUNT": "", "MEMLEDGER_SQLITE_synchronous": "full"},
        # Names that only upper() makes the variables' (\u017f is S, \u0131 is I): the configuration reads neither
        {"MEMLEDGER_DATABA\u017fE_URL": "sqlite:///b.db", "memledger_sql\u0131te_synchronous": "full"},
    ],
)
def test_the_ledger_commands_read_their_variables_as_the_configuration_does(
    spelling: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.cli.ledger import DEFAULT_ACCOUNT, DEFAULT_DATABASE_URL
    from worker.config import WorkerConfig
    from worker.ledger_access import LedgerAccess

    # Given the three variables spelled in some case, or empty
    for name in ("MEMLEDGER_DATABASE_URL", "MEMLEDGER_ACCOUNT", "MEMLEDGER_SQLITE_SYNCHRONOUS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in spelling.items():
        monkeypatch.setenv(name, value)
    # Then the ledger commands read what the configuration reads
    access, config = LedgerAccess.from_environment(), WorkerConfig()
    read = (access.database_url or DEFAULT_DATABASE_URL, access.account or DEFAULT_ACCOUNT, access.synchronous())
    assert read == (config.database_url, config.account, config.sqlite_synchronous)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgres://ledger:pw@hunter2@db.example/ledger", "postgres://ledger:***@db.example/ledger"),  # an @ in it
        ("postgresql:/ledger:hunter2@db.example/ledger", "postgresql:***@db.example/ledger"),  # a typo in ://
        ("ledger:hunter2@db.example/ledger", "ledger:***@db.example/ledger"),  # no scheme at all
    ],
)
def test_a_malformed_url_is_reported_without_any_of_its_password(
    monkeypatch: pytest.MonkeyPatch, url: str, shown: str
) -> None:
    # Given a database URL that fails its check for the way it is written, with a password in it
    monkeypatch.setenv("MEMLEDGER_DATABASE_URL", url)
    # When the configuration is read, Then the URL is named without any of the password (part or whole was shown)
    with pytest.raises(ConfigError) as info:
        load_config()
    assert "hunter2" not in str(info.value) and f"MEMLEDGER_DATABASE_URL={shown!r}" in str(info.value), info.value
