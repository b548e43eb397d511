"""Secret references in config values: `${env:NAME}` and `${file:/path}`.

A value that is exactly one reference is replaced by the environment variable's value or
the file's content (one trailing newline removed, so `echo secret > file` works); any
other value is used as written. Only whole values are references: a password that merely
contains `${` stays a password. Resolution happens once, when the config is loaded, and a
missing variable or unreadable file is a `ConfigError` naming the key, so a bad reference
stops `python -m runtime check` instead of the first connection.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from runtime.errors import ConfigError

_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")


def is_reference(value: str) -> bool:
    return _REFERENCE.fullmatch(value) is not None


def resolve(value: str, key: str, environ: Mapping[str, str] | None = None) -> str:
    """`value` with a reference replaced by what it refers to; raises ConfigError(key)."""
    match = _REFERENCE.fullmatch(value)
    if match is None:
        return value
    kind, name = match.groups()
    if kind == "env":
        return _from_env(name, key, os.environ if environ is None else environ)
    return _from_file(name, key)


def _from_env(name: str, key: str, environ: Mapping[str, str]) -> str:
    if name not in environ:
        raise ConfigError(f"the environment variable {name} is not set", key)
    return environ[name]


def _from_file(name: str, key: str) -> str:
    try:
        text = Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {name}: {exc.strerror or exc}", key) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{name} is not UTF-8 text", key) from None
    return text.removesuffix("\n").removesuffix("\r")
