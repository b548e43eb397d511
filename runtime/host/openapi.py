"""The admin API's OpenAPI 3.1 document, served at `GET /openapi.json` (issue 13).

The host describes its own routes (`/healthz`, `/readyz`, `/metrics`, `/`,
`/openapi.json`, and `/delay/levels` when the delay service adds it); each service
describes the routes it adds (`app[OPENAPI].describe(...)`, as actors/delivery/api/subscriptions.py
does). `document(router)` lists only operations whose route is registered, so the
document says what this process serves, and `undescribed(router)` names routes nobody
described (a test keeps that list empty).

Security follows the config: with a token every operation needs the bearer scheme except
`GET /` and, with `public_health`, the two probes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from aiohttp import web

from runtime.host.jsonbody import JSON, JSONObject

MEDIA_JSON: Final = "application/json"
Operation = JSONObject

ERROR_TEXT: Final = {
    400: "a malformed or invalid request; `reason` names the field",
    401: "no valid `Authorization: Bearer <token>`",
    403: "sent by a web page from another origin",
    404: "no such subscription (or route)",
    408: "the request body did not arrive within `[admin] body_timeout_ms`",
    413: "body larger than the limit",
    415: "body not `application/json`",
    429: "a limit of the instance is reached (replays, subscriptions, topics): `details` "
         "names it",
    503: "cannot be done now (a subscription that cannot start, actors restarting)",
}
BASE_SCHEMAS: Final[JSONObject] = {
    "Error": {
        "type": "object",
        "required": ["success", "reason", "details"],
        "properties": {"success": {"const": False}, "reason": {"type": "string"},
                       "details": {"type": "string"}},
    },
}


def ref(name: str) -> JSONObject:
    return {"$ref": f"#/components/schemas/{name}"}


def success(data: Mapping[str, JSON]) -> JSONObject:
    """The schema of `{"success": true, "data": <data>}`."""
    return {"type": "object", "required": ["success", "data"],
            "properties": {"success": {"const": True}, "data": dict(data)}}


def json_answer(description: str, schema: Mapping[str, JSON]) -> JSONObject:
    return {"description": description, "content": {MEDIA_JSON: {"schema": dict(schema)}}}


def errors(*statuses: int) -> JSONObject:
    return {str(s): json_answer(ERROR_TEXT[s], ref("Error")) for s in statuses}


def json_body(schema: Mapping[str, JSON], *, required: bool = True) -> JSONObject:
    return {"required": required, "content": {MEDIA_JSON: {"schema": dict(schema)}}}


_HEALTH: Final[JSONObject] = {"type": "object", "required": ["status"],
                  "properties": {"status": {"type": "string"},
                                 "services": {"type": "array", "items": {"type": "string"}},
                                 "brokers": {"type": "object",
                                             "additionalProperties": {"type": "string"}}}}
_READY: Final[JSONObject] = {"type": "object", "required": ["ready"],
                 "properties": {"ready": {"type": "boolean"},
                                "reasons": {"type": "array", "items": {"type": "string"}}}}
HOST_OPERATIONS: Final[dict[tuple[str, str], Operation]] = {
    ("GET", "/healthz"): {
        "summary": "Liveness: ok while the process runs",
        "responses": {"200": json_answer("running", _HEALTH),
                      "503": json_answer("starting or stopping", _HEALTH)}},
    ("GET", "/readyz"): {
        "summary": "Readiness, with a reason per broker or subscription that is not",
        "responses": {"200": json_answer("ready", _READY),
                      "503": json_answer("not ready", _READY)}},
    ("GET", "/metrics"): {
        "summary": "Prometheus text format",
        "responses": {"200": {"description": "metrics",
                              "content": {"text/plain": {"schema": {"type": "string"}}}}}},
    ("GET", "/"): {
        "summary": "The status page (HTML; it asks for the token itself)",
        "security": [],
        "responses": {"200": {"description": "the page",
                              "content": {"text/html": {"schema": {"type": "string"}}}}}},
    ("GET", "/status.js"): {
        "summary": "The status page's script (no data in it)",
        "security": [],
        "responses": {"200": {"description": "the script", "content": {
            "text/javascript": {"schema": {"type": "string"}}}}}},
    ("GET", "/openapi.json"): {
        "summary": "This document",
        "responses": {"200": json_answer("OpenAPI 3.1", {"type": "object"})}},
    ("GET", "/delay/levels"): {
        "summary": "The delay queue's levels",
        "responses": {"200": json_answer("the levels", {})}},
}


class OpenApi:
    def __init__(self, *, token: bool = False, public_health: bool = False) -> None:
        self.token = token
        self.public_health = public_health
        self._operations: dict[tuple[str, str], Operation] = {}
        self._schemas: JSONObject = dict(BASE_SCHEMAS)
        for (method, path), operation in HOST_OPERATIONS.items():
            self.describe(method, path, operation)

    def describe(self, method: str, path: str, operation: Operation) -> None:
        """Describe `method path` (aiohttp's `{name}` placeholders are OpenAPI's too)."""
        self._operations[(method.upper(), path)] = operation

    def add_schemas(self, schemas: Mapping[str, JSON]) -> None:
        self._schemas.update(schemas)

    def undescribed(self, router: web.UrlDispatcher) -> list[tuple[str, str]]:
        return sorted(r for r in _routes(router) if r not in self._operations)

    def document(self, router: web.UrlDispatcher, server: str) -> JSONObject:
        paths: dict[str, JSONObject] = {}
        for method, path in sorted(_routes(router)):
            operation = self._operations.get((method, path))
            if operation is not None:
                paths.setdefault(path, {})[method.lower()] = self._secured(path, operation)
        components: JSONObject = {"schemas": self._schemas}
        document: JSONObject = {
            "openapi": "3.1.0",
            "info": {"title": "hookstream admin API (Queue-Over-Http compatible)",
                     "version": "1"},
            "servers": [{"url": server}],
            "paths": {path: operations for path, operations in paths.items()},
            "components": components,
        }
        if self.token:
            components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            document["security"] = [{"bearer": []}]
        return document

    def _secured(self, path: str, operation: Operation) -> Operation:
        public = "security" in operation or (self.public_health and
                                             path in ("/healthz", "/readyz"))
        if not self.token:
            return {k: v for k, v in operation.items() if k != "security"}
        if public:
            return {**operation, "security": [{"bearer": []}, {}]}
        responses = operation.get("responses")
        known = responses if isinstance(responses, dict) else {}
        return {**operation, "responses": {**known, **errors(401)}}

    def __repr__(self) -> str:
        return f"<OpenApi {len(self._operations)} operations>"


def _routes(router: web.UrlDispatcher) -> Iterable[tuple[str, str]]:
    for resource in router.resources():
        info = resource.get_info()
        path = info.get("path") or info.get("formatter")
        if not isinstance(path, str):
            continue
        for route in resource:
            if route.method not in ("HEAD", "*"):  # aiohttp adds HEAD to every GET
                yield route.method, path


OPENAPI: Final = web.AppKey("openapi", OpenApi)
