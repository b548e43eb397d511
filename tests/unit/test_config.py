"""Config: the shipped examples load; bad keys, types and files give clear messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.host.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = '[[brokers]]\nname = "Kafka"\nbootstrap_servers = "embedded"\n'


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["demo.toml", "production.toml"])
def test_shipped_examples_are_valid(name: str) -> None:
    config = load_config(ROOT / "config" / name)
    assert config.brokers[0].name == "Kafka"


def test_defaults_fill_what_is_not_given(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL))
    assert config.admin.listen == "127.0.0.1:8080"
    assert config.journal.dir == "journal"
    assert config.delay.levels == []


def test_an_origin_takes_512_connections_unless_told(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL))
    assert config.egress.origin_max_connections == 512  # issue 37: 1000 before


def test_config_is_frozen(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL))
    with pytest.raises(AttributeError):
        config.admin = None  # type: ignore[misc]


def test_unknown_key_is_named_with_its_path(tmp_path: Path) -> None:
    text = '[[brokers]]\nname = "Kafka"\nbootstrap_server = "embedded"\n'
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert info.value.path == "brokers[0].bootstrap_server"
    assert "unknown key" in str(info.value)


def test_wrong_type_is_named_with_its_path(tmp_path: Path) -> None:
    text = MINIMAL + '[[delay.levels]]\nname = "5s"\ndelay_ms = "5000"\ntopics = ["d"]\n'
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert info.value.path == "delay.levels[0].delay_ms"
    assert "Expected `int`" in str(info.value)


def test_bad_bootstrap_servers_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"brokers\[0\].bootstrap_servers"):
        parse_config({"brokers": [{"name": "K", "bootstrap_servers": "no port"}]})


def test_missing_brokers_is_reported() -> None:
    with pytest.raises(ConfigError, match="brokers: missing required key"):
        parse_config({})


def test_a_topic_in_two_levels_is_rejected() -> None:
    levels = [{"name": "a", "delay_ms": 1, "topics": ["t"]},
              {"name": "b", "delay_ms": 2, "topics": ["t"]}]
    with pytest.raises(ConfigError, match=r"delay.levels\[1\].topics"):
        parse_config({"brokers": [{"name": "K", "bootstrap_servers": "embedded"}],
                      "delay": {"levels": levels}})


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")


def test_invalid_toml_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(write(tmp_path, "[[brokers]\n"))


@pytest.mark.parametrize(("content", "says"), [
    (b'[[brokers]]\nname = "\xff\xfe"\n', "not UTF-8"),
    (b"a = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
])
def test_a_config_that_is_no_text_or_too_deep_is_one_line_without_a_traceback(
        tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=says):
        load_config(path)
    result = run_cli("check", str(path))
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


def test_check_names_a_misspelled_key_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + '[admin]\nlisten = "127.0.0.1:1"\ntokn = "x"\n')
    result = run_cli("check", str(path))
    assert result.returncode != 0
    assert "admin.tokn" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_accepts_the_demo_config() -> None:
    result = run_cli("check", "config/demo.toml")
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_help_lists_the_commands() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "check" in result.stdout and "report" in result.stdout


def test_an_unknown_delay_broker_is_named_with_its_path() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"brokers": [{"name": "K", "bootstrap_servers": "embedded"}],
                      "delay": {"broker": "Nope"}})
    assert info.value.path == "delay.broker"
    assert "unknown broker 'Nope'" in str(info.value)


def test_an_invalid_delay_dead_letter_topic_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"brokers": [{"name": "K", "bootstrap_servers": "embedded"}],
                      "delay": {"dead_letter_topic": "no spaces/allowed"}})
    assert info.value.path == "delay.dead_letter_topic"


def test_egress_networks_are_checked_and_name_the_entry() -> None:
    with pytest.raises(ConfigError, match=r"egress\.deny_networks\[1\]"):
        parse_config({"brokers": [{"name": "K", "bootstrap_servers": "embedded"}],
                      "egress": {"deny_networks": ["10.0.0.0/8", "nope"]}})
    config = parse_config({"brokers": [{"name": "K", "bootstrap_servers": "embedded"}],
                           "egress": {"allow_networks": ["10.0.0.0/8"]}})
    assert config.egress.allow_networks == ["10.0.0.0/8"] and config.egress.deny_networks is None


def test_a_listen_address_without_a_port_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"admin\.listen"):
        parse_config({"brokers": [{"name": "K", "bootstrap_servers": "embedded"}],
                      "admin": {"listen": "0.0.0.0"}})


def test_the_hookstream_command_is_the_same_cli() -> None:
    import tomllib

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, function = target["hookstream"].split(":")
    call = (f"import sys; sys.argv = ['hookstream', 'check', 'config/demo.toml']; "
            f"from {module} import {function}; {function}()")
    result = subprocess.run([sys.executable, "-c", call], capture_output=True, text=True,
                            cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("config/demo.toml: ok")
    assert "usage: hookstream" in run_cli("--help").stdout


def test_without_the_dependencies_check_says_what_to_run_instead_of_a_traceback() -> None:
    """`-S`: this interpreter without site-packages, like a fresh clone's system python3."""
    result = subprocess.run([sys.executable, "-S", "-m", "runtime", "check", "config/demo.toml"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "cannot import msgspec" in result.stderr
    assert ".venv/bin/hookstream" in result.stderr and "make venv" in result.stderr
