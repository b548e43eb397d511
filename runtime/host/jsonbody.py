"""JSON request bodies, decoded without trusting them (issue 13).

`load_json(body)` decodes one JSON document, refusing bytes that are not UTF-8 (the
decoder's own error is a `UnicodeDecodeError`, which once became a 500) and nesting the
decoder cannot follow (a deep body once hit a `RecursionError`). `check_value(value)` then
refuses, naming where: nesting deeper than `MAX_DEPTH`, NUL in any key or string (it
breaks file names, header values, C libraries) and text that is not UTF-8 (lone
surrogates). It walks the whole value in Python: run it after a typed conversion has
bounded the sizes, as actors/delivery/document/subscription.py does. Numbers out of range are left
to that conversion, which knows each field.
"""

from __future__ import annotations

from typing import Final, TypeAlias

import msgspec

JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None
"""A JSON document as msgspec decodes it (and as `msgspec.json.encode` takes it)."""
JSONObject: TypeAlias = dict[str, JSON]
"""A JSON object: a subscription document, an OpenAPI schema, a status answer."""

MAX_DEPTH: Final = 16
"""Objects and arrays inside each other; a subscription needs 5."""


class JsonRejected(ValueError):
    """A body that is not acceptable JSON: `reason` is short, `details` says where."""

    def __init__(self, reason: str, details: str) -> None:
        super().__init__(f"{reason}: {details}")
        self.reason = reason
        self.details = details


def load_json(body: bytes | bytearray | memoryview) -> JSON:
    try:
        value: JSON = msgspec.json.decode(body)
    except UnicodeDecodeError as exc:
        raise JsonRejected("malformed JSON", f"not UTF-8: {exc.reason} at byte {exc.start}"
                           ) from None
    except RecursionError:
        raise JsonRejected("malformed JSON", f"nested deeper than {MAX_DEPTH}") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise JsonRejected("malformed JSON", str(exc)) from None
    return value


def check_value(value: object) -> None:
    """`value` (decoded JSON, or what a library caller built) within the limits above;
    also refuses strings that cannot be encoded as UTF-8 (lone surrogates)."""
    _check(value, "", 0)


def _check(value: object, path: str, depth: int) -> None:
    if isinstance(value, str):
        _check_string(value, path, "")
    elif isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            raise JsonRejected("malformed JSON",
                               f"nested deeper than {MAX_DEPTH} at {path or 'the top'}")
        if isinstance(value, dict):
            for key, item in value.items():
                inner = f"{path}.{key}" if path else str(key)
                _check_string(str(key), inner, " (the key)")
                _check(item, inner, depth + 1)
        else:
            for i, item in enumerate(value):
                _check(item, f"{path}[{i}]", depth + 1)


def _check_string(text: str, path: str, what: str) -> None:
    field = (path or "body") + what
    if "\0" in text:
        raise JsonRejected(f"invalid {field}", "contains NUL")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise JsonRejected(f"invalid {field}", "not valid UTF-8 text") from None
