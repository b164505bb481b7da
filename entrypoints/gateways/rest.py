"""The REST API (seed 001's routes and the other capabilities'): an ASGI app that sends each
request over NATS as its caller (one connection per bearer token) and answers in camelCase.

    {"success": true, ...}                                      200, 201, 202
    {"success": false, "error": {"code", "message", "details"}} 400, 401, 404, 409, 429, 503, 500
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from functools import cache
from typing import Any, cast

import orjson
from chronicle_client.connection import ChronicleClient
from chronicle_contract.base import MAX_IDEMPOTENCY_KEY, Command, idempotency_key
from chronicle_contract.conversations import ConversationView, ExportConversation
from chronicle_contract.errors import ChronicleError
from chronicle_contract.jobs import GetJob
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from pydantic import BaseModel, create_model
from pydantic_core import to_jsonable_python
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from entrypoints.gateways.casing import camel_path, casing, to_camel, to_snake, web_schema
from entrypoints.gateways.clients import UserClients, bearer_token, failure_of
from entrypoints.gateways.cors import CorsForBrowsers
from entrypoints.gateways.direct_routes import DirectRoutes
from entrypoints.gateways.job_events import JobFollower, job_stream
from entrypoints.gateways.nul_free import JSON_VALUE_SCHEMA, NOT_BLANK, nul_free
from entrypoints.gateways.request_metrics import RequestMetrics, RequestRecorder
from entrypoints.gateways.rest_routes import ROUTES, Body, HttpRoute, with_timestamps

log = logging.getLogger(__name__)

STATUS = {
    "invalid": 400, "unauthorized": 401, "not_found": 404, "conflict": 409,
    "rate_limited": 429, "unavailable": 503, "internal": 500,
}
MAX_BODY = 2 * 1024 * 1024  # bytes of a JSON body; the service's own limits are lower still
MAX_DEPTH = 64  # levels of arrays and objects in a body
PATH_PARAMETER = re.compile(r"{(\w+)}")
CONVERSATION_NOT_FOUND = "Conversation not found or access denied"  # seed 001's words, missing or another's
HITL_RUN_NOT_FOUND = "HITL run not found"  # seed 004's words
EXPOSED = ["Retry-After", "Content-Disposition", "X-Chronicle-Position"]


def json_response(body: Body, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def error_response(error: ChronicleError) -> Response:
    details = [{**d, "field": camel_path(d["field"])} if d.get("field") else d for d in error.details]
    if error.code == "invalid" and details and all(d.get("rule") == "cursor" for d in details):
        # A cursor names a page; one this service never gave names no page there is.
        error = ChronicleError("not_found", error.message, error.details)
    message = error.message
    if error.code == "invalid" and details and message.startswith("invalid request: "):
        message = "invalid request: " + ", ".join(d["field"] for d in details if d.get("field"))
    headers = {}
    if error.code == "rate_limited":
        waits = [float(d["retry_after"]) for d in details if isinstance(d.get("retry_after"), int | float)]
        headers["Retry-After"] = str(max(1, int(-(-max(waits, default=1.0) // 1))))
    body = {"success": False, "error": {"code": error.code, "message": message, "details": details}}
    return json_response(body, STATUS[error.code], headers)


class Gateway:
    """The routes served over one set of user connections."""

    def __init__(self, clients: UserClients, routes: Iterable[HttpRoute] = ROUTES):
        self.clients = clients
        self.routes = tuple(routes)

    async def fields(self, route: HttpRoute, request: Request) -> Body:
        """The request's fields in the model's own names, from path, query string or body;
        the path's ids always win, and a field given twice (camelCase and snake_case) is refused."""
        given: Body = {}
        if route.method in ("GET", "DELETE"):
            arrays = array_fields(route.request)
            for key in request.query_params:
                values = request.query_params.getlist(key)
                if to_snake(key) in arrays:
                    given[key] = [item for value in values for item in value.split(",") if item]
                elif to_snake(key) in object_fields(route.request):  # declared as JSON in the query
                    given[key] = json_parameter(key, values[-1])
                else:
                    given[key] = values[-1]
        else:
            given = await json_body(request)
        fields = casing(route.request, "validation").bus(given)
        if len(fields) < len(given):  # two keys named the same field
            counts = Counter(to_snake(key) for key in given)
            twice = sorted(name for name, count in counts.items() if count > 1)
            message = f"{', '.join(map(to_camel, twice))} given twice (camelCase and snake_case)"
            raise ChronicleError("invalid", message, [{"field": to_camel(name), "rule": "once", "message": message}
                                                      for name in twice])
        for key, value in request.path_params.items():
            name = to_snake(key)
            if name in fields and str(fields[name]) != value:
                message = f"{key} differs from the path's"
                raise ChronicleError("invalid", message, [{"field": key, "rule": "path", "message": message}])
            fields[name] = value
        return route.fields(fields)

    async def handle(self, route: HttpRoute, request: Request) -> Response:
        release = None
        try:
            token = bearer_token(request.headers.get("authorization"))  # before the body costs anything
            key = idempotency_key(checked_key(request.headers.get("idempotency-key")))
            fields = await self.fields(route, request)
            if route.method not in ("GET", "DELETE"):  # (a query string's values are all text)
                check_booleans(route.request, fields)
                check_numbers(route.request, fields)
            model = route.request(**fields)
            if key is not None and not isinstance(model, Command):
                key = None  # a query is answered afresh each time
            client, release = await self.clients.acquire(token)
            if route.download:
                return await download(client, cast(ExportConversation, model))
            if route.run is not None:
                data = await route.run(client, model, key)
            else:
                data = await client.send_json(model, key)  # type: ignore[arg-type]
            if route.snake:  # (the seed's own names)
                shown = {**{to_snake(k): v for k, v in reply_defaults(route.request.reply).items()}, **data}
            else:
                shown = {**reply_defaults(route.request.reply), **casing(route.request.reply).web(data)}
            if route.reread is not None:  # (read at the command's position: the client passes it on)
                reread = route.reread(model)
                shown["conversation"] = casing(reread.reply).web(await client.send_json(reread))  # type: ignore[arg-type]
            body = {"success": True, **(route.shape(shown, model) if route.shape else shown)}
            headers = {"X-Chronicle-Position": str(client.last_position)} if client.last_position is not None else None
            return json_response(body, route.status, headers)
        except Exception as error:  # every failure answers in the envelope
            failed = failure_of(error)
            if failed.code == "not_found" and "{conversationId}" in route.path:
                failed = ChronicleError("not_found", CONVERSATION_NOT_FOUND, failed.details)
            elif failed.code == "not_found" and route.path.startswith("/api/hitl/{runId}/"):
                failed = ChronicleError("not_found", HITL_RUN_NOT_FOUND, failed.details)
            return error_response(failed)
        finally:
            if release is not None:
                release()

    async def job_events(self, request: Request) -> Response:
        """`GET /api/jobs/{jobId}/events`: Server-Sent Events, the job's state now, then each
        progress message (`event: progress`), then its final state (`event: job`)."""
        try:
            token = bearer_token(request.headers.get("authorization"))
            follower = JobFollower(self.clients, token, GetJob(job_id=request.path_params["jobId"]).job_id)
            try:
                first = await follower.start()  # (its lease holds the connection: never closed under the stream)
            except BaseException:
                await follower.stop()
                raise
        except Exception as error:
            return error_response(failure_of(error))
        return StreamingResponse(job_stream(follower, first), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})


async def json_body(request: Request) -> Body:
    """The JSON object a POST or PUT carries, read no further than MAX_BODY bytes and no
    deeper than MAX_DEPTH levels (the service's own limits are lower still)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise too_big()
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                raise too_big()
            chunks.append(chunk)
    except ClientDisconnect:  # (gone, or closed by the server for a body that did not come in time)
        raise ChronicleError("invalid", "the body did not arrive") from None
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        given = orjson.loads(raw)  # (orjson itself refuses nesting past 1,024)
    except orjson.JSONDecodeError:
        raise ChronicleError("invalid", "the body must be JSON",
                             [{"field": "body", "rule": "json", "message": "not JSON"}]) from None
    if not isinstance(given, dict):
        raise ChronicleError("invalid", "the body must be a JSON object",
                             [{"field": "body", "rule": "object", "message": "not an object"}])
    if nesting(given) > MAX_DEPTH:
        message = f"the body nests deeper than {MAX_DEPTH} levels"
        raise ChronicleError("invalid", message, [{"field": "body", "rule": "max_depth", "message": message}])
    return given


def too_big() -> ChronicleError:
    message = f"the body must be at most {MAX_BODY} bytes"
    return ChronicleError("invalid", message, [{"field": "body", "rule": "max_bytes", "message": message}])


def nesting(value: Any) -> int:
    """How deeply arrays and objects nest in a JSON value, without recursion."""
    deepest, level = 0, [(value, 1)]
    while level:
        item, depth = level.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            level.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


async def download(client: ChronicleClient, request: ExportConversation) -> Response:
    """An export as a file: the client reads its parts and joins them."""
    # (the position the caller asked to read from is this request's only: not remembered)
    export = await client.conversations.export(request.conversation_id, request.format,
                                               min_position=request.min_position)
    content = export.content
    if request.format == "json":  # camelCase like every other body; free JSON keeps its keys
        document = with_timestamps(casing(ConversationView).web(orjson.loads(content)))
        content = orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
    media, suffix = ("text/markdown; charset=utf-8", "md") if request.format == "markdown" else ("application/json", "json")
    filename = f"conversation-{request.conversation_id}.{suffix}"
    return Response(content.encode(), media_type=media,
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


IDEMPOTENCY_KEY = re.compile(rf"[!-~]{{1,{MAX_IDEMPOTENCY_KEY}}}")  # as the OpenAPI document declares it


def checked_key(value: str | None) -> str | None:
    if value is not None and not IDEMPOTENCY_KEY.fullmatch(value):
        message = f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
        raise ChronicleError("invalid", message, [{"field": "Idempotency-Key", "rule": "pattern", "message": message}])
    return value


def comma_free(schema: dict[str, Any]) -> dict[str, Any]:
    """A list parameter's schema whose items hold no comma: the query string's lists are
    comma-separated too (`tags=a,b`)."""
    if "items" in schema:
        return {**schema, "items": {"allOf": [schema["items"], {"pattern": "^[^,]*$"}]}}
    return {**schema, **({"anyOf": [comma_free(branch) for branch in schema["anyOf"]]} if "anyOf" in schema else {})}


def check_booleans(model: type[BaseModel], fields: Body) -> None:
    """A JSON body's booleans are true or false: pydantic would take 0 or "yes" for one."""
    for name in boolean_fields(model):
        if name in fields and fields[name] is not None and not isinstance(fields[name], bool):
            message = f"{to_camel(name)} must be true or false"
            raise ChronicleError("invalid", message, [{"field": to_camel(name), "rule": "bool_type", "message": message}])


def check_numbers(model: type[BaseModel], fields: Body) -> None:
    """A JSON body's numbers are numbers: pydantic would take true or false for one (as 1 or 0)."""
    for name in number_fields(model):
        if isinstance(fields.get(name), bool):
            message = f"{to_camel(name)} must be a number, not true or false"
            raise ChronicleError("invalid", message, [{"field": to_camel(name), "rule": "number_type", "message": message}])


@cache
def field_types(model: type[BaseModel]) -> dict[str, set[str]]:
    """Each field of the request and the JSON types its schema allows."""
    return {name: schema_types(item) for name, item in casing(model, "validation").schema.get("properties", {}).items()}


@cache
def number_fields(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(name for name, types in field_types(model).items()
                     if types & {"number", "integer"} and "boolean" not in types)


@cache
def boolean_fields(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(name for name, types in field_types(model).items() if "boolean" in types)


@cache
def object_fields(model: type[BaseModel]) -> frozenset[str]:
    """The request's object fields: a query string gives each as JSON."""
    return frozenset(name for name, types in field_types(model).items() if types in ({"object"}, {"object", "null"}))


def schema_types(item: dict[str, Any]) -> set[str]:
    return {branch["type"] for branch in [item, *item.get("anyOf", ())] if isinstance(branch.get("type"), str)}


def json_parameter(name: str, value: str) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        message = f"{name} must be JSON"
        raise ChronicleError("invalid", message, [{"field": name, "rule": "json", "message": message}]) from None


@cache
def reply_defaults(model: type[BaseModel]) -> Body:
    """The reply's optional fields at their defaults, in camelCase: a body always has every
    field its schema requires (a no-op write's `position` is null, not absent)."""
    return {to_camel(name): to_jsonable_python(info.get_default(call_default_factory=True))
            for name, info in model.model_fields.items() if not info.is_required()}


@cache
def array_fields(model: Any) -> frozenset[str]:
    """The request's list fields: a query string gives them comma-separated."""
    schema = casing(model, "validation").schema  # (the schema the renaming was compiled from)
    return frozenset(name for name, item in schema.get("properties", {}).items()
                     if item.get("type") == "array" or any(b.get("type") == "array" for b in item.get("anyOf", ())))


DOCS_ASSETS = "/docs/assets"
TITLE = "Chronicle"
DESCRIPTION = ("Chronicle's REST API: conversations, sessions, human-in-the-loop runs, artifacts, jobs, "
               "optimizations and audit. "
               "Send `Authorization: Bearer <token>`; commands honour `Idempotency-Key`.")


def build_app(
    clients: UserClients, *, cors_origins: list[str] | None = None, routes: Iterable[HttpRoute] = ROUTES,
    metrics: RequestRecorder | None = None,
) -> Starlette:
    """The ASGI app; `cors_origins` ["*"] by default (bearer tokens, no cookies). Plain
    Starlette routes: each endpoint reads its own request (FastAPI's per-request dependency
    machinery measured at about a third of the gateway's CPU per request and did nothing
    here), and the API's requests are answered in front of the router and its middleware
    (direct_routes.py); the OpenAPI document is generated from the models, the docs pages
    are FastAPI's."""
    gateway = Gateway(clients, routes)
    document: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        sweeper = asyncio.get_running_loop().create_task(sweep_forever(clients))
        try:
            yield
        finally:
            sweeper.cancel()
            await clients.close()

    async def job_events(request: Request) -> Response:
        return await gateway.job_events(request)

    async def openapi(_: Request) -> Response:
        if not document:
            document.update(openapi_document(gateway.routes))
        return json_response(document)

    async def docs(_: Request) -> Response:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title=f"{TITLE} API", swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css", swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},  # (else a badge asks an online validator)
        )

    async def redoc(_: Request) -> Response:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{TITLE} API",
                              redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png", with_google_fonts=False)

    # One route per path serving each of its methods, so that another method is answered 405
    # with every method the path has in `Allow`.
    by_path: dict[str, dict[str, HttpRoute]] = {}
    for route in gateway.routes:
        by_path.setdefault(route.path, {})[route.method] = route
    fixed = {path: list(methods) for path, methods in by_path.items() if not PATH_PARAMETER.search(path)}
    served: list[BaseRoute] = [Route(path, endpoint(gateway, methods, fixed), methods=list(methods))
                               for path, methods in by_path.items()]
    served += [
        Route("/api/jobs/{jobId}/events", job_events, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/docs", docs, methods=["GET"]),
        Route("/redoc", redoc, methods=["GET"]),
        # The docs pages' scripts and styles from the installed fastapi-offline package, not
        # a CDN: the pages work on a machine with no way out.
        Mount(DOCS_ASSETS, StaticFiles(packages=[("fastapi_offline", "static")])),
    ]
    cors = Middleware(CorsForBrowsers, allow_origins=cors_origins or ["*"], allow_methods=["*"],
                      allow_headers=["Authorization", "Content-Type", "Idempotency-Key"], expose_headers=EXPOSED)
    counted = [Middleware(RequestMetrics, metrics=metrics)] if metrics is not None else []
    direct = Middleware(DirectRoutes, routes=gateway.routes, handle=gateway.handle, metrics=metrics)
    async def no_route(request: Request, error: Exception) -> Response:
        status = getattr(error, "status_code", 404)
        code, message = ("not_found", "no such route") if status == 404 else ("invalid", "method not allowed here")
        headers = getattr(error, "headers", None)  # (405: Allow, the path's methods)
        return json_response({"success": False, "error": {"code": code, "message": message, "details": []}}, status,
                             dict(headers) if headers else None)

    return Starlette(routes=served, middleware=[direct, *counted, cors], lifespan=lifespan,
                     exception_handlers={404: no_route, 405: no_route})


def endpoint(gateway: Gateway, routes: dict[str, HttpRoute], fixed: dict[str, list[str]]) -> Any:
    async def serve(request: Request) -> Response:
        allowed = fixed.get(request.scope["path"])  # (request.url would build the whole URL)
        if allowed is not None and PATH_PARAMETER.search(next(iter(routes.values())).path):
            # `PUT /api/conversations/search` is search's path with a method it lacks, not an update of "search"
            body = {"success": False, "error": {"code": "invalid", "message": "method not allowed here", "details": []}}
            return json_response(body, 405, {"Allow": ", ".join(allowed)})
        method = "GET" if request.method == "HEAD" else request.method
        return await gateway.handle(routes[method], request)

    return serve


async def sweep_forever(clients: UserClients) -> None:
    while True:
        await asyncio.sleep(30)
        await clients.sweep()


REF = "#/components/schemas/{model}"


def openapi_document(routes: Iterable[HttpRoute]) -> dict[str, Any]:
    """The OpenAPI document, every schema generated from the request and reply models."""
    components: dict[str, Any] = {"Error": ERROR_SCHEMA, "LayoutNode": nul_free(LAYOUT_NODE),
                                  "JsonValue": JSON_VALUE_SCHEMA}
    paths: dict[str, Any] = {}

    def schema_of(model: Any, mode: str, snake: bool = False) -> dict[str, Any]:
        schema = model.model_json_schema(ref_template=REF, mode=mode)
        if snake:  # the seed's own names, in components of their own (Seed...)
            schema = orjson.loads(orjson.dumps(schema).replace(b'"#/components/schemas/', b'"#/components/schemas/Seed'))
            schema["$defs"] = {f"Seed{name}": item for name, item in schema.get("$defs", {}).items()}
        schema = nul_free(schema if snake else web_schema(schema))
        components.update(schema.pop("$defs", {}))
        return dict(schema)

    for route in routes:
        in_path = set(PATH_PARAMETER.findall(route.path))
        request_schema = schema_of(route.request, "validation", route.snake)
        left_out = in_path | {name if route.snake else to_camel(name) for name in route.undeclared}
        properties = {k: v for k, v in request_schema.get("properties", {}).items() if k not in left_out}
        required = [k for k in request_schema.get("required", []) if k not in in_path]
        parameters = [{"name": name, "in": "path", "required": True,
                       "schema": request_schema.get("properties", {}).get(name, {"type": "string"})} for name in in_path]
        if route.flat is not None:  # an object field given as flat query parameters (the message page's)
            nested = components[properties.pop(route.flat)["$ref"].rsplit("/", 1)[-1]]
            properties.update(nested["properties"])
        for name, values in route.also_accepted.items():
            properties[name] = {**properties[name], "enum": [*properties[name]["enum"], *values]}
        operation: dict[str, Any] = {"summary": route.summary, "tags": [route.tag],
                                     "operationId": f"{route.method.lower()}_{route.request.__name__}"}
        properties.update({name: nul_free(schema) for name, schema in route.schemas.items()})
        if route.method in ("GET", "DELETE"):
            parameters += [
                {"name": name, "in": "query", "required": name in required,
                 **({"content": {"application/json": {"schema": item}}} if to_snake(name) in object_fields(route.request)
                    else {"schema": comma_free(item) if to_snake(name) in array_fields(route.request) else item})}
                for name, item in properties.items()]
        elif properties:
            body = {**request_schema, "properties": properties, "required": required}
            if route.variants is not None:
                name, schemas = route.variants
                body = {"oneOf": [{**body, "properties": {**properties, name: {"const": value}, **schema}}
                                  for value, schema in schemas.items()]}
            operation["requestBody"] = {"required": bool(required), "content": {"application/json": {"schema": body}}}
        if route.method != "GET":
            parameters.append({"name": "Idempotency-Key", "in": "header", "required": False,
                               "schema": {"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY,
                                          "pattern": "^[!-~]+$"}})
        operation["parameters"] = parameters
        if route.download:
            reply = {"description": "the file", "content": {"application/json": {}, "text/markdown": {}}}
        else:
            named = (lambda name: name) if route.snake else to_camel
            fields = route.body or {named(name): (info.annotation, ...)
                                    for name, info in route.request.reply.model_fields.items()}
            definitions: dict[str, Any] = {"success": (bool, ...), **{
                name: (kind if isinstance(kind, tuple) else (kind, ...)) for name, kind in fields.items()}}
            shaped = create_model(f"{route.request.__name__}Response", **definitions)
            reply = {"description": "done",
                     "content": {"application/json": {"schema": schema_of(shaped, "serialization", route.snake)}}}
        operation["responses"] = {str(route.status): reply, **ERROR_RESPONSES}
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    paths.setdefault("/api/jobs/{jobId}/events", {})["get"] = {
        "summary": "A job's progress as Server-Sent Events (event: job, progress)", "tags": ["jobs"],
        "parameters": [{"name": "jobId", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}],
        "responses": {"200": {"description": "text/event-stream", "content": {"text/event-stream": {}}},
                      **ERROR_RESPONSES},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": TITLE, "version": "1", "description": DESCRIPTION},
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }


LAYOUT_NODE = {  # what domain/layout.py takes as a node (its size and depth bounds aside)
    # (a type is not blank as str.strip sees it, as Text's rule has it: "\x1e" is blank there)
    "type": "object", "required": ["type"], "additionalProperties": True,
    "properties": {"type": {"type": "string", "pattern": NOT_BLANK}, "id": {"type": "string"}, "label": {"type": "string"},
                   "children": {"type": "array", "items": {"$ref": REF.format(model="LayoutNode")}}},
}
ERROR_RESPONSES = {str(status): {"description": code, "content": {"application/json": {"schema": {"$ref": REF.format(model="Error")}}}}
                   for code, status in STATUS.items()}
ERROR_SCHEMA = {
    "type": "object",
    "required": ["success", "error"],
    "properties": {
        "success": {"const": False},
        "error": {"type": "object", "required": ["code", "message"], "properties": {
            "code": {"enum": list(STATUS)}, "message": {"type": "string"},
            "details": {"type": "array", "items": {"type": "object"}}}},
    },
}
