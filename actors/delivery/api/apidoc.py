"""The delivery routes in the admin API's OpenAPI document (`GET /openapi.json`): those of
actors/delivery/api/subscriptions.py (Queue-Over-Http) and actors/delivery/api/control.py (one
subscription). The Consumer schema is generated from the structs that decode it
(actors/delivery/document/subscription.py), so the document cannot drift from the decoder; the
decoder checks more than a schema can say (a known broker, a safe pattern, a free name).
"""

from __future__ import annotations

from typing import Final

import msgspec

from actors.delivery.document.subscription import (
    ID_CHARS,
    ConsumerDocument,
    HandlerConsumerDocument,
)
from runtime.host.jsonbody import JSON, JSONObject
from runtime.host.openapi import OpenApi, errors, json_answer, json_body, ref, success

ONE: Final = "/broker/subscription/{id}/{groupId}"
_PAIR: Final[list[JSON]] = [
    {"name": name, "in": "path", "required": True,
     "schema": {"type": "string", "minLength": 1}, "description": what}
    for name, what in (("id", "the subscription's id"), ("groupId", "its group.id"))
]
_ID: Final[JSONObject] = {"type": "string", "minLength": 1, "maxLength": 200,
                          "pattern": f"^{ID_CHARS}$"}
UNSUBSCRIBE: Final[JSONObject] = {
    "description": "The whole Consumer JSON, or just `id` and `group` (or the deprecated "
                   "`id` and `group.id`); nothing else is read.",
    "type": "object",
    "anyOf": [
        {"required": ["id", "group"],
         "properties": {"id": _ID, "group": {"type": "object", "required": ["id"],
                                             "properties": {"id": _ID}}}},
        {"required": ["id", "group.id"],
         "properties": {"id": _ID, "group.id": _ID}},
    ],
}
SHOWN: Final[JSONObject] = {
    "description": "A Consumer document (redacted), or an in-process subscription's: its "
                   "subscriptionMethod names a Python handler (`type` \"handler\").",
    "anyOf": [ref("ConsumerDocument"), ref("HandlerConsumerDocument")],
}
STATUS: Final[JSONObject] = {
    "type": "object", "required": ["consumer", "status"],
    "properties": {"consumer": SHOWN, "status": {"type": "object"}},
}
REFUSED_COMMIT: Final[JSONObject] = {
    "description": "A partition whose commits Kafka refuses (a live consumer in the "
                   "subscription's group): the refused `position` and the last one Kafka "
                   "`accepted` from this instance (null: none since its cursor started).",
    "type": "object", "required": ["topic", "partition", "position", "accepted"],
    "properties": {"topic": {"type": "string"}, "partition": {"type": "integer"},
                   "position": {"type": ["integer", "null"]},
                   "accepted": {"type": ["integer", "null"]}, "reason": {"type": "string"}},
}
LISTED: Final[JSONObject] = {
    "description": "A Consumer document (redacted) plus `state`, `inProcess` and "
                   "`refusedCommits`; an in-process subscription's `subscriptionMethod` is "
                   "`{\"type\": \"handler\", \"handler\": \"module.qualname\", ...}` "
                   "(no `uri`).",
    "type": "object", "required": ["id", "group", "state", "inProcess", "refusedCommits"],
    "properties": {"id": _ID, "state": {"type": "string"}, "inProcess": {"type": "boolean"},
                   "refusedCommits": {"type": "array", "items": REFUSED_COMMIT}},
}
_ATTEMPT_FIELDS: Final[tuple[tuple[str, JSONObject], ...]] = (
    ("topic", {"type": "string"}),
    ("partition", {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}),
    ("offset", {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}),
    ("webhookId", {"type": "string"}),
    ("failed", {"type": "string", "enum": ["true"]}),
    ("limit", {"type": "integer", "minimum": 1, "maximum": 1000}),
)
ATTEMPT_QUERY: Final[list[JSON]] = [
    {"name": name, "in": "query", "required": False, "schema": schema}
    for name, schema in _ATTEMPT_FIELDS
]
LIST_PAGE: Final[list[JSON]] = [
    {"name": "offset", "in": "query", "required": False,
     "schema": {"type": "integer", "minimum": 0, "maximum": 1_000_000}},
    {"name": "limit", "in": "query", "required": False,
     "schema": {"type": "integer", "minimum": 1, "maximum": 1_000_000}},
]
_CHANGE: Final = (403, 408, 413, 415)  # what any request with a body may get
_CONSUMER: Final = success(ref("ConsumerDocument"))
_STATUS: Final = success(ref("SubscriptionStatus"))


def _operation(summary: str, answer: JSONObject, *statuses: int,
               body: JSONObject | None = None,
               parameters: list[JSON] | None = None, code: str = "200") -> JSONObject:
    """`code` is the success status (`202` for work that runs on)."""
    operation: JSONObject = {"summary": summary,
                             "responses": {code: json_answer("done", answer),
                                           **errors(*statuses)}}
    if body is not None:
        operation["requestBody"] = body
    if parameters:
        operation["parameters"] = parameters
    return operation


def describe_delivery_api(doc: OpenApi) -> None:
    _, schemas = msgspec.json.schema_components(
        [ConsumerDocument, HandlerConsumerDocument],
        ref_template="#/components/schemas/{name}")
    doc.add_schemas({**schemas, "SubscriptionStatus": STATUS, "Unsubscribe": UNSUBSCRIBE})
    consumer = json_body(ref("ConsumerDocument"))
    doc.describe("POST", "/broker/subscription", _operation(
        "Subscribe (Queue-Over-Http); answers the consumer, secrets redacted", _CONSUMER,
        400, 429, 503, *_CHANGE, body=consumer))
    doc.describe("GET", "/broker/subscription", _operation(
        "Every subscription, secrets redacted, with its state (a page of them with offset "
        "and limit; a Link header names the next)",
        success({"type": "array", "items": LISTED}), 400, parameters=LIST_PAGE))
    doc.describe("POST", "/broker/unsubscribe", _operation(
        "Unsubscribe: drains, commits, forgets", _CONSUMER, 400, 404, *_CHANGE,
        body=json_body(ref("Unsubscribe"))))
    doc.describe("GET", ONE, _operation(
        "One subscription and its status", _STATUS, 404, parameters=_PAIR))
    doc.describe("PUT", ONE, _operation(
        "Change a subscription in place (drain, commit, start with the new settings)",
        _STATUS, 400, 404, 429, 503, *_CHANGE, body=consumer, parameters=_PAIR))
    for verb, what in (("pause", "Stop fetching; in-flight pushes finish, commit"),
                       ("resume", "Start again from the committed positions")):
        doc.describe("POST", f"{ONE}/{verb}", _operation(what, _STATUS, 404, *_CHANGE,
                                                         parameters=_PAIR))
    replay = _operation(
        "Replay records to the endpoint again (pushes carry QOH-Replay)",
        success({"type": "object"}), 400, 404, 429, 503, *_CHANGE,
        body=json_body({"type": "object"}, required=False), parameters=_PAIR,
        code="202")  # accepted: it runs on
    doc.describe("POST", f"{ONE}/replay", replay)
    doc.describe("GET", f"{ONE}/attempts", _operation(
        "What happened to a record (topic, partition and offset, or webhookId), or the "
        "latest failed attempts (failed=true, limit)", success({"type": "object"}), 400, 404,
        parameters=[*_PAIR, *ATTEMPT_QUERY]))
    doc.describe("GET", f"{ONE}/replay/{{replayId}}", _operation(
        "A replay's progress", success({"type": "object"}), 404,
        parameters=[*_PAIR, {"name": "replayId", "in": "path", "required": True,
                             "schema": {"type": "string", "minLength": 1}}]))
