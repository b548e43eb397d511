"""Secret references in config values: `${env:NAME}` and `${file:/path}`.

A value that is exactly one reference is replaced by the environment variable's value or
the file's content (one trailing newline removed, so `echo secret > file` works); any
other value is used as written. Only whole values are references: a password that merely
contains `${` stays a password. Resolution happens once, when the config is loaded, and a
missing variable or unreadable file is a `ConfigError` naming the key, so a bad reference
stops `python -m runtime check` instead of the first connection.

Subscriptions use the same resolver (actors/delivery/document/secrets.py): their `additionalHeaders`
values and `signingSecret` may be references, kept as written in the stored document and
the cluster's subscriptions topic, and resolved by each instance when the subscription
starts. `UnresolvedReference` (a ConfigError) carries the reference, so a caller can name
it in its own error.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
from collections.abc import Mapping, Sequence
from typing import Final

from runtime.errors import ConfigError

_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")
MAX_FILE_BYTES: Final = 1 << 20
"""A referenced file is a regular file of at most 1 MiB: a reference to /dev/zero or a
FIFO (which anyone who may post a subscription could write) must not hang or exhaust the
process."""


class UnresolvedReference(ConfigError):
    """A reference that names a variable that is not set or a file that cannot be read."""

    def __init__(self, message: str, key: str, reference: str) -> None:
        super().__init__(message, key)
        self.reason = message
        self.reference = reference


def is_reference(value: str) -> bool:
    return _REFERENCE.fullmatch(value) is not None


def resolve(value: str, key: str, environ: Mapping[str, str] | None = None,
            allowed: Sequence[str] | None = None) -> str:
    """`value` with a reference replaced by what it refers to; raises
    UnresolvedReference(key) (a ConfigError). With `allowed` (glob patterns over
    `env:NAME` and `file:/real/path`, as `[egress] allow_references`), a reference no
    pattern matches is refused without being read."""
    match = _REFERENCE.fullmatch(value)
    if match is None:
        return value
    kind, name = match.groups()
    if allowed is not None and not permitted(kind, name, allowed):
        raise UnresolvedReference("not allowed by [egress] allow_references", key, value)
    if kind == "env":
        return _from_env(name, key, value, os.environ if environ is None else environ)
    return _from_file(name, key, value)


def permitted(kind: str, name: str, allowed: Sequence[str]) -> bool:
    """Whether `env:NAME` or `file:<path, symlinks and '..' resolved>` matches a pattern
    (`*` matches '/' too, so the path is made real first: `/run/secrets/../../etc/x` is
    `/etc/x`)."""
    subject = f"file:{os.path.realpath(name)}" if kind == "file" else f"{kind}:{name}"
    return any(fnmatch.fnmatchcase(subject, pattern) for pattern in allowed)


def _from_env(name: str, key: str, reference: str, environ: Mapping[str, str]) -> str:
    if name not in environ:
        raise UnresolvedReference(f"the environment variable {name} is not set", key,
                                  reference)
    return environ[name]


def _from_file(name: str, key: str, reference: str) -> str:
    try:
        text = read_small_file(name).decode("utf-8")
    except OSError as exc:
        raise UnresolvedReference(f"cannot read {name}: {exc.strerror or exc}", key,
                                  reference) from None
    except UnicodeDecodeError:
        raise UnresolvedReference(f"{name} is not UTF-8 text", key, reference) from None
    return text.removesuffix("\n").removesuffix("\r")


def read_small_file(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of regular file `path`; OSError when it cannot be read, is not a regular
    file (a FIFO would block, a device never end) or is larger than `limit`."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise OSError(errno.EINVAL, "not a regular file")
    if info.st_size > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes")
    with open(path, "rb") as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes")
    return data
