"""Requests: how one subscription's records become HTTP requests (its egress actor's room,
actors/delivery/egress/http.py).

A record goes as headers, a body or a query parameter, and a Standard Webhooks signature
when the subscription signs; a batch as one JSON body (actors/delivery/egress/batching.py)
whose `webhook-id` names its first and last record. For a method with a body on the lean
transport, a single record's headers are one formatted string (`lines`), not a dict: the
same names, values and order, the same bytes on the wire
(tests/integration/test_egress_template.py), for a fraction of the calls (issue 37).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from hashlib import sha256

from actors.delivery.document.signing import sign_all, webhook_id_of
from actors.delivery.egress.batching import BATCH_CONTENT_TYPE, batch_body
from actors.shared.messages import Record


def key_header(key: bytes | None) -> tuple[str, bool]:
    """The `QOH-Message-Key` value and whether it is base64 (see the module docstring)."""
    if key is None:
        return "", False
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return base64.b64encode(key).decode(), True
    if text.isprintable() and text == text.strip():
        return text, False
    return base64.b64encode(key).decode(), True


Built = tuple[dict[str, str], bytes | None, dict[str, str] | None]
"""A request's per-record headers (the static ones are the session's), body and query."""


@dataclass(frozen=True, slots=True)
class Requests:
    has_body: bool
    charset: str = "utf-8"
    query_key: str = "message"
    keys: list[bytes] = field(default_factory=list)
    """The signing keys (none: unsigned)."""

    def build(self, record: Record, now_s: int) -> Built:
        """A record's headers, body and query, sent at `now_s` (seconds)."""
        key, encoded = key_header(record.key)
        topic, partition, offset = record.coordinates()  # a retry: the original ones
        msg_id = webhook_id_of(record)
        headers = {
            "QOH-Topic": topic,  # Kafka topic names are [a-zA-Z0-9._-]: header-safe
            "QOH-Partition": str(partition),
            "QOH-Message-Key": key,
            "QOH-Message-Number": str(offset),
            "webhook-id": msg_id,
            "webhook-timestamp": str(now_s),
        }
        if encoded:
            headers["QOH-Message-Key-Encoding"] = "base64"
        if record.replay is not None:
            headers["QOH-Replay"] = record.replay
        value = record.value or b""
        if self.has_body:
            body, params, payload = value, None, value
        else:
            text = value.decode(self.charset, errors="replace")
            body, params, payload = None, {self.query_key: text}, text.encode()
        if self.keys:
            headers["webhook-signature"] = sign_all(self.keys, msg_id, now_s, payload)
        return headers, body, params

    def lines(self, record: Record, now_s: int) -> str:
        """`build`'s headers as the lines the lean transport writes, for a method with a
        body (the body is the record's value)."""
        timestamp_ms = record.timestamp_ms
        if record.retry is None and timestamp_ms >= 0:  # `webhook_id_of`, inline
            topic, partition, offset = record.topic, record.partition, record.offset
            msg_id = "msg_" + sha256(
                f"{topic}/{partition}/{offset}/{timestamp_ms}".encode()).hexdigest()[:32]
        else:
            topic, partition, offset = record.coordinates()
            msg_id = webhook_id_of(record)
        key = record.key
        encoded = False
        if key is None:
            text = ""
        else:
            text, encoded = key_header(key)
        lines = (f"QOH-Topic: {topic}\r\nQOH-Partition: {partition}\r\n"
                 f"QOH-Message-Key: {text}\r\nQOH-Message-Number: {offset}\r\n"
                 f"webhook-id: {msg_id}\r\nwebhook-timestamp: {now_s}\r\n")
        if encoded:
            lines += "QOH-Message-Key-Encoding: base64\r\n"
        if record.replay is not None:
            lines += f"QOH-Replay: {record.replay}\r\n"
        if self.keys:
            signature = sign_all(self.keys, msg_id, now_s, record.value or b"")
            lines += f"webhook-signature: {signature}\r\n"
        return lines

    def batch(self, records: list[Record], now_s: int) -> Built:
        """A batch's headers and JSON body. `webhook-id` names the first and last record,
        so a batch grouped the same way again keeps it."""
        first, last = records[0], records[-1]
        msg_id = f"{webhook_id_of(first)}-{last.offset}"
        body = batch_body(records)
        headers = {
            "Content-Type": BATCH_CONTENT_TYPE,
            "QOH-Topic": first.topic,
            "QOH-Partition": str(first.partition),
            "QOH-Message-Number": str(first.offset),
            "QOH-Batch-Size": str(len(records)),
            "webhook-id": msg_id,
            "webhook-timestamp": str(now_s),
        }
        if first.replay is not None:
            headers["QOH-Replay"] = first.replay
        if self.keys:
            headers["webhook-signature"] = sign_all(self.keys, msg_id, now_s, body)
        return headers, body, None
