"""Subscription filters (issue 26): which records of a topic a subscriber receives.

A topic entry may carry `filter`; every condition given must hold::

    {"headers": {"event-type": ["order.created", "order.paid"]},
     "key": {"prefix": "tenant-42/"},
     "json": {"type": {"prefix": "order."}, "amount": {"exists": true},
              "customer.tier": ["gold", "platinum"]},
     "not": {"headers": {"test": "true"}}}

A condition is a string (equals), a list of strings (any of them), or an object with
exactly one of `equals` (a string), `in` (a list), `prefix` (a string or a list: any of
them) and `exists` (a boolean).

- `headers`: by Kafka header name (exact, case-sensitive); the header's bytes are compared
  with the UTF-8 of the condition; a header that occurs several times matches when any
  occurrence does. `exists: false` holds when the header is absent.
- `key`: the record key's bytes against the UTF-8 of the condition; a record without a key
  matches only `exists: false`.
- `json`: dot paths (`customer.tier`; a decimal segment indexes an array) into the record
  value decoded as JSON, only when a filter needs it. A value over `MAX_JSON_BYTES`
  (256 KiB) is not decoded and counts as not JSON (#34: 11 MB values held the loop and
  the memory). Values
  compare as text: a string by its content, a number, `true`, `false` or `null` by its
  JSON text (`"amount": "12.50"` matches `12.50`, not `12.5`); an object or array matches
  only `exists`. A value that is not JSON, or lacks the path, matches only
  `exists: false`.
- `not`: a nested filter that must not match.

Decoding (`decode_filter`) validates the wire JSON into frozen, hashable structures with
sizes and depth bounded, and the whole filter's cost too (`MAX_FILTER_COST`: each
condition costs its path segments, 1 for a header or the key, plus its strings, summed over
every `not` level; and `MAX_FILTER_CHARS` characters in all: #34, a 748 KB filter within
every per-part limit cost 2 ms per record); an error is
`InvalidSubscription("invalid <where>.<field>")`, which the admin API answers as 400.
Equal filters decode to one shared object (interned), so the per-record memo (below)
finds them by identity, without comparing structures. `equals` and `in` look a value up
in a set: their cost does not grow with the list.

Evaluation (`matches(filter, record)`) is memoised on the record (`Record.memo`): each
distinct filter's result, keyed by the filter, and each JSON condition's, keyed by (path,
condition). With fan-out one record object goes to many subscriptions' cursors; a thousand
subscribers with ten distinct filters then evaluate ten filters per record. The decoded
JSON value lives for one evaluation only (a buffered record kept it: #34), so a record
is decoded at most once per distinct filter with a JSON condition not seen before.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Final, Literal, TypeVar

import msgspec

from actors.delivery.errors import InvalidSubscription
from actors.shared.messages import Record
from runtime.host.jsonbody import JSON, JSONObject

K = TypeVar("K")
Op = Literal["equals", "in", "prefix", "exists"]
OPS: Final[tuple[Op, ...]] = ("equals", "in", "prefix", "exists")
SECTIONS: Final = ("headers", "key", "json", "not")
MAX_CONDITIONS: Final = 32
"""Header and JSON conditions together, per filter (each `not` level counts its own)."""
MAX_VALUES: Final = 256
"""Strings in one list condition."""
MAX_TEXT: Final = 1024
"""Characters of one compared string, header name or JSON path."""
MAX_PATH_SEGMENTS: Final = 16
MAX_NOT_DEPTH: Final = 4
MAX_FILTER_COST: Final = 1024
"""Per filter, `not` levels included: each condition costs its path segments (1 for a
header or the key) plus the strings it compares with."""
MAX_FILTER_CHARS: Final = 65_536
"""Per filter, `not` levels included: characters of names, paths and compared strings."""
MAX_JSON_BYTES: Final = 256 * 1024
"""A record value longer than this is not decoded: it counts as not JSON."""


class Condition(msgspec.Struct, frozen=True, cache_hash=True):
    """One condition: `op` with `texts` (equals: one, in: several, prefix: one or more) or
    `exists`; `raw` is `texts` in UTF-8, what header values and keys are compared with."""

    op: Op
    texts: tuple[str, ...] = ()
    raw: tuple[bytes, ...] = ()
    exists: bool = True
    # `equals` and `in` look up: one hash per value, whatever the list (#34)
    members: frozenset[str] = frozenset()
    raw_members: frozenset[bytes] = frozenset()


class Filter(msgspec.Struct, frozen=True, cache_hash=True, weakref=True):
    """A decoded filter: conditions sorted by name (equal filters compare equal however
    their JSON was ordered), `negated` the `not` filter."""

    headers: tuple[tuple[str, Condition], ...] = ()
    key: Condition | None = None
    json: tuple[tuple[tuple[str, ...], Condition], ...] = ()
    negated: Filter | None = None


_INTERNED: weakref.WeakValueDictionary[Filter, Filter] = weakref.WeakValueDictionary()


# -- decoding ---------------------------------------------------------------------------
def decode_filter(value: JSON, where: str) -> Filter | None:
    """The wire JSON of a `filter` (decoded builtins) as a `Filter`; None for no filter
    (absent or `{}`). Raises `InvalidSubscription("invalid <where>...")`."""
    if value is None:
        return None
    decoded = _filter(value, where, 0)
    cost, chars = filter_cost(decoded)
    if cost > MAX_FILTER_COST or chars > MAX_FILTER_CHARS:
        raise InvalidSubscription(f"invalid {where}", f"costs {cost} and holds {chars} "
                                  f"characters; at most {MAX_FILTER_COST} and "
                                  f"{MAX_FILTER_CHARS} over every not level (a condition "
                                  "costs its path segments, 1 for a header or the key, "
                                  "plus its strings)")
    return None if decoded == Filter() else decoded


def filter_cost(decoded: Filter) -> tuple[int, int]:
    """What evaluating `decoded` costs per record (see `MAX_FILTER_COST`), and the
    characters it holds."""
    cost = chars = 0
    named = [((name,), c) for name, c in decoded.headers] + list(decoded.json)
    if decoded.key is not None:
        named.append(((), decoded.key))
    for path, condition in named:
        cost += max(len(path), 1) + len(condition.texts)
        chars += sum(map(len, path)) + sum(map(len, condition.texts))
    if decoded.negated is not None:
        inner_cost, inner_chars = filter_cost(decoded.negated)
        cost, chars = cost + inner_cost, chars + inner_chars
    return cost, chars


def _filter(value: JSON, where: str, depth: int) -> Filter:
    if not isinstance(value, dict):
        raise InvalidSubscription(f"invalid {where}", "expected an object with headers, "
                                  "key, json or not")
    for name in value:
        if name not in SECTIONS:
            raise InvalidSubscription(f"invalid {where}.{name}", "unknown; a filter has "
                                      "headers, key, json and not")
    headers = _named(value.get("headers"), f"{where}.headers", _header_name)
    json = _named(value.get("json"), f"{where}.json", _json_path)
    if len(headers) + len(json) > MAX_CONDITIONS:
        raise InvalidSubscription(f"invalid {where}", f"at most {MAX_CONDITIONS} header "
                                  "and json conditions")
    key = None if "key" not in value else _condition(value["key"], f"{where}.key")
    negated = None
    if "not" in value:
        if depth >= MAX_NOT_DEPTH:
            raise InvalidSubscription(f"invalid {where}.not", f"at most {MAX_NOT_DEPTH} "
                                      "nested not")
        negated = _filter(value["not"], f"{where}.not", depth + 1)
    return intern(Filter(headers=headers, key=key, json=json, negated=negated))


def intern(decoded: Filter) -> Filter:
    """The one shared object equal to `decoded`."""
    return _INTERNED.setdefault(decoded, decoded)


def _named(section: JSON, where: str, name_of: Callable[[str, str], K]
              ) -> tuple[tuple[K, Condition], ...]:
    if section is None:
        return ()
    if not isinstance(section, dict):
        raise InvalidSubscription(f"invalid {where}", "expected an object: name -> condition")
    if len(section) > MAX_CONDITIONS:
        raise InvalidSubscription(f"invalid {where}", f"at most {MAX_CONDITIONS} conditions")
    pairs = [(name_of(name, f"{where}.{name}"), _condition(item, f"{where}.{name}"), name)
             for name, item in section.items()]
    return tuple((key, cond) for key, cond, _ in sorted(pairs, key=lambda p: p[2]))


def _header_name(name: str, where: str) -> str:
    if not name or len(name) > MAX_TEXT:
        raise InvalidSubscription(f"invalid {where}", f"a header name of 1 to {MAX_TEXT} "
                                  "characters")
    return name


def _json_path(path: str, where: str) -> tuple[str, ...]:
    segments = tuple(path.split("."))
    if not path or len(path) > MAX_TEXT or not all(segments):
        raise InvalidSubscription(f"invalid {where}", f"a dot path like 'customer.tier' "
                                  f"(no empty segment, at most {MAX_TEXT} characters)")
    if len(segments) > MAX_PATH_SEGMENTS:
        raise InvalidSubscription(f"invalid {where}", f"at most {MAX_PATH_SEGMENTS} segments")
    return segments


def _condition(value: JSON, where: str) -> Condition:
    if isinstance(value, str):
        return _texts("equals", (value,), where)
    if isinstance(value, list):
        return _texts("in", _strings(value, where), where)
    if not isinstance(value, dict):
        raise InvalidSubscription(f"invalid {where}", "a condition is a string, a list of "
                                  "strings, or an object with one of equals, in, prefix, "
                                  "exists (numbers compare by their JSON text: write "
                                  "\"42\")")
    if len(value) != 1 or next(iter(value)) not in OPS:
        raise InvalidSubscription(f"invalid {where}", "an object condition has exactly one "
                                  "of equals, in, prefix, exists")
    op, operand = next(iter(value.items()))
    inner = f"{where}.{op}"
    if op == "exists":
        if not isinstance(operand, bool):
            raise InvalidSubscription(f"invalid {inner}", "true or false")
        return Condition("exists", exists=operand)
    if op == "equals":
        if not isinstance(operand, str):
            raise InvalidSubscription(f"invalid {inner}", "a string (numbers compare by "
                                      "their JSON text: write \"42\")")
        return _texts("equals", (operand,), inner)
    kind: Op = "prefix" if op == "prefix" else "in"
    if kind == "prefix" and isinstance(operand, str):
        return _texts("prefix", (operand,), inner)
    return _texts(kind, _strings(operand, inner), inner)


def _strings(value: JSON, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise InvalidSubscription(f"invalid {where}", "a non-empty list of strings")
    if len(value) > MAX_VALUES:
        raise InvalidSubscription(f"invalid {where}", f"at most {MAX_VALUES} values")
    strings: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise InvalidSubscription(f"invalid {where}[{i}]", "a string (numbers compare by "
                                      "their JSON text: write \"42\")")
        strings.append(item)
    return tuple(strings)


def _texts(op: Op, texts: tuple[str, ...], where: str) -> Condition:
    for text in texts:
        if len(text) > MAX_TEXT:
            raise InvalidSubscription(f"invalid {where}", f"at most {MAX_TEXT} characters "
                                      "per value")
    raw = tuple(t.encode() for t in texts)
    if op == "prefix":
        return Condition(op, texts, raw)
    return Condition(op, texts, raw, members=frozenset(texts), raw_members=frozenset(raw))


# -- writing it back ------------------------------------------------------------------------
def filter_document(decoded: Filter) -> JSONObject:
    """The wire JSON of `decoded`, in its short form (what GET shows): equals as a string,
    in as a list."""
    out: JSONObject = {}
    if decoded.headers:
        out["headers"] = {name: _condition_document(c) for name, c in decoded.headers}
    if decoded.key is not None:
        out["key"] = _condition_document(decoded.key)
    if decoded.json:
        out["json"] = {".".join(path): _condition_document(c) for path, c in decoded.json}
    if decoded.negated is not None:
        out["not"] = filter_document(decoded.negated)
    return out


def _condition_document(condition: Condition) -> JSON:
    op, texts = condition.op, condition.texts
    if op == "exists":
        return {"exists": condition.exists}
    if op == "equals":
        return texts[0]
    if op == "in":
        return list(texts)
    return {"prefix": texts[0] if len(texts) == 1 else list(texts)}


# -- evaluation -----------------------------------------------------------------------------
class _Absent:
    """What an absent JSON value decodes to, and a document not decoded yet."""

    __slots__ = ()


_MISSING: Final = _Absent()  # the value is not JSON, or a path leads nowhere
_UNREAD: Final = _Absent()  # not decoded yet
_DECODER: Final = msgspec.json.Decoder(float_hook=str)  # floats keep their JSON text


class _Document:
    """A record's value, decoded when a JSON condition first needs it; it lives for one
    `matches` call (its `not` levels included), never in the record's memo."""

    __slots__ = ("_raw", "_value")

    def __init__(self, raw: bytes | None) -> None:
        self._raw = raw
        self._value: object = _UNREAD

    def value(self) -> object:
        if self._value is _UNREAD:
            self._value = _decode(self._raw)
        return self._value


def matches(decoded: Filter, record: Record) -> bool:
    """True when `record` passes `decoded`; memoised on the record per distinct filter."""
    memo = record.memo
    if memo is None:
        memo = record.memo = {}
    else:
        known = memo.get(decoded)
        if known is not None:
            return known is True
    return _matches(decoded, record, memo, _Document(record.value))


def _matches(decoded: Filter, record: Record, memo: dict[object, object],
             document: _Document) -> bool:
    known = memo.get(decoded)
    if known is not None:
        return known is True
    result = memo[decoded] = _evaluate(decoded, record, memo, document)
    return result


def _evaluate(decoded: Filter, record: Record, memo: dict[object, object],
              document: _Document) -> bool:
    for name, condition in decoded.headers:
        if not _holds_raw(condition, [v for n, v in record.headers if n == name]):
            return False
    key = decoded.key
    if key is not None and not _holds_raw(key, [] if record.key is None else [record.key]):
        return False
    for pair in decoded.json:
        held = memo.get(pair)
        if held is None:
            path, condition = pair
            held = memo[pair] = _holds_json(condition, _walk(document.value(), path))
        if held is not True:
            return False
    negated = decoded.negated
    return negated is None or not _matches(negated, record, memo, document)


def reads_json(decoded: Filter) -> bool:
    """True when evaluating `decoded` decodes record values."""
    negated = decoded.negated
    return bool(decoded.json) or (negated is not None and reads_json(negated))


def _holds_raw(condition: Condition, found: list[bytes | None]) -> bool:
    """Header occurrences or the key: any one that satisfies `condition`."""
    op = condition.op
    if op == "exists":
        return bool(found) == condition.exists
    for value in found:
        if value is None:
            continue
        if op == "prefix":
            if value.startswith(condition.raw):
                return True
        elif value in condition.raw_members:
            return True
    return False


def _holds_json(condition: Condition, value: object) -> bool:
    if condition.op == "exists":
        return (value is not _MISSING) == condition.exists
    text = _text(value)
    if text is None:
        return False
    if condition.op == "prefix":
        return text.startswith(condition.texts)
    return text in condition.members


def _text(value: object) -> str | None:
    """A JSON scalar as compared: strings (and floats, kept as their text) as they are."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    return None  # an object, an array, or missing


def _decode(value: bytes | None) -> object:
    if value is None or len(value) > MAX_JSON_BYTES:
        return _MISSING
    try:
        return _DECODER.decode(value)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return _MISSING


def _walk(value: object, path: tuple[str, ...]) -> object:
    for segment in path:
        if isinstance(value, dict):
            value = value.get(segment, _MISSING)
        elif isinstance(value, list) and segment.isdecimal() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return _MISSING
    return value
