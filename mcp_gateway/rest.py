"""The REST mirror of the MCP tools: django-ninja under ``/api/v1/``.

Every endpoint runs its tool through :func:`tools.run`, as ``tools/call``
does on the MCP endpoint and on stdio (input validation, the handler, the
tool metrics), so the surfaces cannot drift: a 200 body is exactly the
tool's ``structuredContent``, and a tool error is the error envelope.
The contract is derived, not restated:

* query parameters and JSON bodies are pydantic models generated from each
  tool's ``inputSchema`` (types, bounds, enums, defaults, descriptions);
* 200 bodies are documented with the tool's ``outputSchema`` itself, its
  ``$defs`` moved to ``components/schemas``.

The MCP resources have two read-only routes, ``/resources`` and
``/resources/read``, whose 200 body is the ``resources/list`` or
``resources/read`` result itself (``mcp_gateway/resources.py``).

Host, Origin, the bearer token and the shared per-client rate limit are
checked before any route runs, by the gate every route passes
(``mcp_gateway/route_gate.py``); here, ``Content-Type: application/json`` for
POST bodies. The OpenAPI document (``/api/v1/openapi.json``) and the docs
page (``/api/v1/docs``) are public: they describe the API and hold no data.

With x402 on (``--x402 on|required``), a route whose tool is priced is sold
exactly like ``tools/call``: the same gate (payments/gate.py), price, replay
store and audit, in the header variant (402 + ``PAYMENT-REQUIRED``, then
``PAYMENT-SIGNATURE``, then ``PAYMENT-RESPONSE``). See :func:`paid_call`.

Every error is one envelope, ``{"error": {"code", "message", "retryable"}}``,
with the §14 code and the HTTP status of :func:`kernel.errors.http_status`,
written by :func:`mcp_gateway.rest_edge.error_response`. Request validation
errors, including ninja's own, are 400 (never 422).
"""

import copy
import functools
import json
import logging
import threading
from collections.abc import Callable, Mapping
from types import GenericAlias
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, TypeVar

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from ninja import Body, NinjaAPI, Query, Schema, Swagger
from ninja.errors import AuthenticationError
from ninja.errors import HttpError as NinjaHttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.openapi.schema import REF_TEMPLATE, OpenAPISchema
from ninja.parser import Parser
from ninja.security.http import HttpAuthBase
from ninja.types import DictStrAny
from pydantic import BaseModel, ConfigDict, Field, create_model

from corpus import store_faults, uris
from corpus.security import MAX_PATH_SEGMENTS
from kernel import errors
from kernel.jsontypes import JsonObject, JsonValue
from mcp_gateway import context, current, resources, schemas, tools, transport, workers
from mcp_gateway.rest_edge import error_response
from mcp_gateway.route_gate import PASSED, REST

if TYPE_CHECKING:  # for an annotation only: payments is imported when a paid call runs (paid_call)
    from payments.outcome import Outcome

log = logging.getLogger(__name__)

TAG = "dir2mcp"

_R = TypeVar("_R")
_A = TypeVar("_A")

# -- errors --------------------------------------------------------------------


class ErrorBody(Schema):
    code: str = Field(description="A canonical error code (spec §14), e.g. INVALID_RANGE.")
    message: str = Field(description="What went wrong, safe to show a user.")
    retryable: bool = Field(description="Whether the same request may succeed later.")


class ErrorEnvelope(Schema):
    """Every error the REST mirror returns."""

    error: ErrorBody


# -- auth ------------------------------------------------------------------------


class BearerAuth(HttpAuthBase):
    """The bearer scheme of the OpenAPI document, and Content-Type for POST.

    ninja's auth hook is the callable itself (``AuthBase.__call__``); its
    ``HttpBearer`` would read the token here, but the gate in front of every
    route (``mcp_gateway/route_gate.py``) has already checked Host, Origin,
    the token and the rate limit, and a server with ``--auth none`` takes
    requests with no token at all. A request the gate did not pass as a REST
    request (this app served some other way, as by ``runserver``, or reached
    under a route the gate took for another surface) is refused, never
    served unchecked. Returns the :class:`~mcp_gateway.context.Context`
    (``request.auth``), or raises :class:`transport.HttpError`, which
    becomes the error envelope.
    """

    openapi_scheme = "bearer"

    def __call__(self, request: HttpRequest) -> context.Context:
        route = getattr(request, "scope", {}).get(PASSED)
        if route is None or route.surface != REST:
            raise transport.HttpError(
                503, errors.CONFIG_INVALID, "not served through the gate; serve with `up` or daphne"
            )
        if request.method == "POST":
            transport.check_content_type(request.headers.get("Content-Type"))
        return current.get()


# -- the API ---------------------------------------------------------------------


def _openapi_schema(schema: JsonObject) -> tuple[JsonObject, JsonObject]:
    """A registry schema with ``#/$defs/X`` rewritten to components, and its defs."""
    schema = copy.deepcopy(schema)
    defs = schema.pop("$defs", {})

    def rewrite(node: JsonValue) -> JsonValue:
        if isinstance(node, dict):
            return rewrite_object(node)
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        return node

    def rewrite_object(node: Mapping[str, JsonValue]) -> JsonObject:
        return {
            key: (
                value.replace("#/$defs/", "#/components/schemas/")
                if key == "$ref" and isinstance(value, str)
                else rewrite(value)
            )
            for key, value in node.items()
        }

    return rewrite_object(schema), {name: rewrite(value) for name, value in defs.items()}


class RestAPI(NinjaAPI):
    """NinjaAPI whose components also hold the registry's output schemas."""

    def get_openapi_schema(
        self,
        *,
        path_prefix: str | None = None,
        path_params: dict[str, Any] | None = None,  # Any: NinjaAPI.get_openapi_schema's signature
    ) -> OpenAPISchema:
        document = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        components = document.setdefault("components", {}).setdefault("schemas", {})
        for name, tool_name in RESULTS.items():
            schema, defs = _openapi_schema(tools.table()[tool_name].output_schema)
            components.update(defs)
            components[name] = {"title": name, **schema}
        components.update(copy.deepcopy(RESOURCE_SCHEMAS))
        envelope = ErrorEnvelope.model_json_schema(ref_template=REF_TEMPLATE)
        components.update(envelope.pop("$defs", {}))
        components["ErrorEnvelope"] = envelope
        return document


class PackagedSwagger(Swagger):
    """Swagger UI from django-ninja's own template and static files, never a
    CDN. ninja renders its packaged page only when the string ``"ninja"`` is
    in INSTALLED_APPS, and its CDN page otherwise; ninja's files are
    installed under another name (dir2mcp_site.apps.NinjaAssets, which
    spares the processes that serve no API importing ninja), so this page
    renders the packaged template itself, with the context ninja gives it."""

    def render_page(
        self,
        request: HttpRequest,
        api: NinjaAPI,
        **kwargs: Any,  # Any: Swagger.render_page's signature
    ) -> HttpResponse:
        self.settings["url"] = self.get_openapi_url(api, kwargs)
        auths = api.auth if isinstance(api.auth, list | tuple) else ()
        context = {
            "swagger_settings": json.dumps(self.settings, indent=1),
            "api": api,
            # a CSRF token in the page only for an auth that checks one (a cookie's)
            "add_csrf": any(getattr(auth, "csrf", False) for auth in auths),
        }
        return render(request, self.template, context)


class _Parser(Parser):
    """ninja's JSON body parser, behind the MCP endpoint's bound on a
    message's tokens: a body is parsed on the event loop here too."""

    def parse_body(self, request: HttpRequest) -> DictStrAny:
        transport.check_tokens(request.body)
        return super().parse_body(request)


api = RestAPI(
    urls_namespace="rest",
    title="dir2mcp REST mirror",
    version=schemas.SCHEMA_VERSION,
    description=(
        "The dir2mcp MCP tools over plain HTTP: the same handlers, arguments and results as `tools/call` "
        "on the MCP endpoint (a 200 body is the tool's `structuredContent`).\n\n"
        "Send the server's bearer token (`Authorization: Bearer <token>`, the MCP endpoint's token) on "
        "every call; browsers' `Origin` must be on `security.allowed_origins`. This document and the docs "
        "page are public: they hold no data.\n\n"
        'Errors are `{"error": {"code", "message", "retryable"}}` with a spec §14 code: 400 for '
        "invalid or missing arguments (MISSING_FIELD, INVALID_FIELD, INVALID_RANGE, DOC_TYPE_UNSUPPORTED), "
        "401 UNAUTHORIZED, 403 FORBIDDEN_ORIGIN / FORBIDDEN / PATH_OUTSIDE_ROOT, 404 FILE_NOT_FOUND, "
        "415 for a POST body that is not application/json, 422 for a file that cannot be served "
        "(FILE_TOO_LARGE, EXTRACT_FAILED, ...), 429 rate limits (with Retry-After when known), 502 model "
        "provider failures, 503 when the index or configuration cannot serve, 500 INTERNAL_ERROR. "
        "A failed query embedding is not an error: search and ask answer 200 from the lexical index, with "
        '`"dense": {"status": "unavailable", "code", "message"}` in the body.\n\n'
        "When the server sells tool calls (x402, `--x402 on|required`), each route costs what its MCP tool "
        "costs: an unpaid call gets 402 with a `PAYMENT-REQUIRED` header, the paid retry sends "
        "`PAYMENT-SIGNATURE`, and a settled answer carries `PAYMENT-RESPONSE`. A facilitator outage is "
        "502/503 PROVIDER_FAILED (retryable, with Retry-After)."
    ),
    docs_url="/docs",
    # Swagger UI from the installed package (files under /static/ninja/), never
    # a CDN; no validator badge (it would call validator.swagger.io).
    docs=PackagedSwagger(settings={"validatorUrl": None}),
    openapi_url="/openapi.json",
    auth=BearerAuth(),
    parser=_Parser(),
)


# -- error handlers --------------------------------------------------------------


def _on_dir2mcp_error(request: HttpRequest, exc: errors.Dir2mcpError) -> HttpResponse:
    headers = {}
    retry_after = getattr(exc, "retry_after", None)
    if errors.http_status(exc.code) == 429 and isinstance(retry_after, int | float) and retry_after > 0:
        headers["Retry-After"] = str(max(1, round(retry_after)))
    return error_response(exc.code, exc.message, headers=headers, retryable=exc.retryable)


def _on_transport_error(request: HttpRequest, exc: transport.HttpError) -> HttpResponse:
    return error_response(exc.code, exc.message, status=exc.status, headers=exc.headers)


def _on_validation_error(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    # loc is ("query", field...) or ("body", "body", field...): keep the field path.
    loc = list(first.get("loc", ()))
    loc = [str(part) for part in loc[2 if loc[:1] == ["body"] else 1 :]]
    where = ".".join(loc) or "the body"
    kind = first.get("type", "")
    if kind == "missing":
        code = errors.MISSING_FIELD
        message = f"{where} is required" if loc else "a JSON object body is required"
    elif kind == "model_type":
        code, message = errors.INVALID_FIELD, f"{where} must be a JSON object"
    elif kind == "string_pattern_mismatch":  # only path arguments have a pattern (schemas.path_argument)
        code, message = errors.INVALID_FIELD, f"{where} has more than {MAX_PATH_SEGMENTS} segments"
    elif kind == "string_too_long" and loc[-1:] and loc[-1] in _path_fields():  # as check_path_bounds says it
        code, message = (
            errors.INVALID_FIELD,
            f"{where} is longer than {first['ctx']['max_length']} characters",
        )
    elif kind in _RANGE_ERRORS:
        code, message = errors.INVALID_RANGE, f"{where}: {first.get('msg', 'out of range')}"
    elif kind == "extra_forbidden":
        code, message = errors.INVALID_FIELD, f"unknown argument: {where}"
    else:
        code, message = errors.INVALID_FIELD, f"{where}: {first.get('msg', 'invalid value')}"
    return error_response(code, message, status=400)


@functools.cache
def _path_fields() -> frozenset[str]:
    """The path and URI arguments (past their bounds, INVALID_FIELD on every
    surface): every argument a tool declares with ``schemas.path_argument``."""
    return frozenset(
        name
        for tool in tools.table().values()
        for name, prop in tool.input_schema.get("properties", {}).items()
        if prop.get("pattern") == schemas.PATH_SEGMENTS_PATTERN
    ) | {"uri"}


_RANGE_ERRORS = frozenset(
    {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "string_too_short"}
    | {"string_too_long", "too_short", "too_long"}
)


def _on_ninja_http_error(request: HttpRequest, exc: NinjaHttpError) -> HttpResponse:
    if isinstance(exc, AuthenticationError):  # our gate raises instead; kept for completeness
        return error_response(
            errors.UNAUTHORIZED, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"}
        )
    if isinstance(exc.__cause__, transport.HttpError):  # ninja wraps what the body parser raised
        return _on_transport_error(request, exc.__cause__)
    status = exc.status_code if 400 <= exc.status_code < 500 else 500
    code = errors.INVALID_FIELD if status < 500 else errors.INTERNAL_ERROR
    return error_response(code, str(exc), status=status)


def _on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(errors.NOT_FOUND, "no such endpoint; see /api/v1/docs")


def _on_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    limit = transport.MAX_BODY_BYTES
    return _on_transport_error(
        request, transport.HttpError(413, errors.INVALID_RANGE, f"request body over the {limit}-byte limit")
    )


def _on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    fault = store_faults.classify(exc)  # a damaged database, a full disk: named, not a bug
    if fault is not None:
        return _on_dir2mcp_error(request, fault)
    log.error("REST %s %s failed", request.method, request.path, exc_info=exc)
    return error_response(errors.INTERNAL_ERROR, "internal error; see the server log")


# ninja annotates a handler's exception as ``Exc | type[Exc]``; it passes the instance.
api.add_exception_handler(errors.Dir2mcpError, _on_dir2mcp_error)  # type: ignore[arg-type]  # ninja: see above
api.add_exception_handler(transport.HttpError, _on_transport_error)  # type: ignore[arg-type]  # ninja: see above
api.add_exception_handler(NinjaValidationError, _on_validation_error)  # type: ignore[arg-type]  # ninja: see above
api.add_exception_handler(NinjaHttpError, _on_ninja_http_error)  # type: ignore[arg-type]  # ninja: see above
api.add_exception_handler(Http404, _on_not_found)  # type: ignore[arg-type]  # ninja: see above
api.add_exception_handler(RequestDataTooBig, _on_too_big)  # type: ignore[arg-type]  # ninja: see above
api.add_exception_handler(Exception, _on_unexpected)  # type: ignore[arg-type]  # ninja: see above


# -- models generated from the input schemas ---------------------------------------


def _drop_default(schema: JsonObject) -> None:
    schema.pop("default", None)


def _annotation(prop: JsonObject) -> object:
    """The field annotation, built at run time, that pydantic validates ``prop`` with."""
    if "enum" in prop:
        return Literal.__getitem__(tuple(prop["enum"]))
    kind = prop.get("type")
    if isinstance(kind, list):
        members = tuple(_annotation({"type": k}) for k in kind)
        return members[0] if len(members) == 1 else _union(members)
    if kind == "array":
        items = prop.get("items", {})
        item = _annotation(items)
        bounds = {_BOUNDS[key]: items[key] for key in _BOUNDS if key in items}
        if bounds:  # each item's own bounds (doc_types' lengths), as the tool's schema sets them
            item = Annotated[item, Field(**bounds)]
        return GenericAlias(list, (item,))  # list[item type]
    return _JSON_TYPES.get(kind, Any)  # Any: pydantic's annotation for a value of any type


_JSON_TYPES: dict[object, type] = {"integer": int, "string": str, "boolean": bool, "number": float}


# Any: annotations built at run time (types, Literal and list aliases) joined with |,
# which the type checker types only as typing forms, not as these objects
def _union(members: tuple[Any, ...]) -> Any:
    out = members[0]
    for member in members[1:]:
        out = out | member
    return out


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_BOUNDS = {
    "minimum": "ge",
    "maximum": "le",
    "minLength": "min_length",
    "maxLength": "max_length",
    "minItems": "min_length",
    "maxItems": "max_length",
    "pattern": "pattern",
}


def input_model(name: str, tool_name: str, *, body: bool) -> type[BaseModel]:
    """A pydantic model of one tool's ``inputSchema``.

    Bodies are strict (JSON types as ``tools/call`` takes them) and refuse
    unknown fields; query strings are coerced ("5" to 5) and unknown
    parameters are ignored.
    """
    schema = tools.table()[tool_name].input_schema
    required = set(schema.get("required", ()))
    # Any: (annotation, FieldInfo) pairs; mypy checks them against every keyword create_model takes
    fields: dict[str, Any] = {}
    for field_name, prop in schema.get("properties", {}).items():
        kwargs = {_BOUNDS[key]: prop[key] for key in _BOUNDS if key in prop}
        if prop.get("type") == "integer":
            # Integers reach SQLite, whose integers are 64-bit (an offset of
            # 2**70 is an IntegrityError there): bound what the schema leaves open.
            kwargs.setdefault("ge", INT64_MIN)
            kwargs.setdefault("le", INT64_MAX)
        if "description" in prop:
            kwargs["description"] = prop["description"]
        if prop.get("type") == "array" and prop.get("items", {}).get("type") == "object":
            # A list of objects is checked by the tool's own schema; the document shows it whole.
            kwargs["json_schema_extra"] = {"items": copy.deepcopy(prop["items"])}
        if field_name in required:
            default = ...
        elif "default" in prop:
            default = prop["default"]
        else:
            default, kwargs["json_schema_extra"] = None, _drop_default
        fields[field_name] = (_annotation(prop), Field(default, **kwargs))
    config = ConfigDict(extra="forbid", strict=True) if body else ConfigDict(extra="ignore")
    return create_model(name, __config__=config, **fields)


if TYPE_CHECKING:  # generated at import time; to mypy, each is some pydantic model
    SearchQuery: TypeAlias = BaseModel
    SearchBody: TypeAlias = BaseModel
    AskBody: TypeAlias = BaseModel
    ListFilesQuery: TypeAlias = BaseModel
    OpenFileQuery: TypeAlias = BaseModel
    FindQuery: TypeAlias = BaseModel
    OutlineQuery: TypeAlias = BaseModel
    ChecksumQuery: TypeAlias = BaseModel
    DiffQuery: TypeAlias = BaseModel
    ReadBytesQuery: TypeAlias = BaseModel
    OpenFilesBody: TypeAlias = BaseModel
    VerifyBody: TypeAlias = BaseModel
    SymbolsQuery: TypeAlias = BaseModel
    ReferencesQuery: TypeAlias = BaseModel
else:
    SearchQuery = input_model("SearchQuery", "dir2mcp.search", body=False)
    SearchBody = input_model("SearchRequest", "dir2mcp.search", body=True)
    AskBody = input_model("AskRequest", "dir2mcp.ask", body=True)
    ListFilesQuery = input_model("ListFilesQuery", "dir2mcp.list_files", body=False)
    OpenFileQuery = input_model("OpenFileQuery", "dir2mcp.open_file", body=False)
    FindQuery = input_model("FindQuery", "dir2mcp.find", body=False)
    OutlineQuery = input_model("OutlineQuery", "dir2mcp.outline", body=False)
    ChecksumQuery = input_model("ChecksumQuery", "dir2mcp.checksum", body=False)
    DiffQuery = input_model("DiffQuery", "dir2mcp.diff", body=False)
    ReadBytesQuery = input_model("ReadBytesQuery", "dir2mcp.read_bytes", body=False)
    OpenFilesBody = input_model("OpenFilesRequest", "dir2mcp.open_files", body=True)
    VerifyBody = input_model("VerifyRequest", "dir2mcp.verify", body=True)
    SymbolsQuery = input_model("SymbolsQuery", "dir2mcp.symbols", body=False)
    ReferencesQuery = input_model("ReferencesQuery", "dir2mcp.references", body=False)

# components/schemas name -> tool, for the 200 bodies
RESULTS = {
    "SearchResult": "dir2mcp.search",
    "AskResult": "dir2mcp.ask",
    "OpenFileResult": "dir2mcp.open_file",
    "ListFilesResult": "dir2mcp.list_files",
    "FindResult": "dir2mcp.find",
    "OutlineResult": "dir2mcp.outline",
    "OpenFilesResult": "dir2mcp.open_files",
    "ChecksumResult": "dir2mcp.checksum",
    "DiffResult": "dir2mcp.diff",
    "ReadBytesResult": "dir2mcp.read_bytes",
    "VerifyResult": "dir2mcp.verify",
    "SymbolsResult": "dir2mcp.symbols",
    "ReferencesResult": "dir2mcp.references",
    "StatsResult": "dir2mcp.stats",
}
_RESULT_FOR = {tool_name: name for name, tool_name in RESULTS.items()}


def _error(description: str, headers: JsonObject | None = None) -> JsonObject:
    out = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
    }
    if headers:
        out["headers"] = {
            name: {"schema": {"type": "string"}, "description": d} for name, d in headers.items()
        }
    return out


_ERRORS = {
    400: _error("Invalid or missing arguments: MISSING_FIELD, INVALID_FIELD, INVALID_RANGE."),
    401: _error(
        "UNAUTHORIZED: missing or invalid bearer token.",
        {"WWW-Authenticate": "The bearer challenge."},
    ),
    402: _error(
        "Payment required or rejected (x402; only when the server sells tool calls, `--x402 on|required`, "
        "and this route's tool is priced): code UNAUTHORIZED. Sign what PAYMENT-REQUIRED asks and send "
        "the same request again with a PAYMENT-SIGNATURE header.",
        {"PAYMENT-REQUIRED": "base64 JSON x402 v2 PaymentRequired (its `error` names a rejection's reason)."},
    ),
    403: _error("FORBIDDEN_ORIGIN: the request's Origin is not on security.allowed_origins."),
    409: _error("SERVER_BUSY (x402): the same payment is being processed by another request; retry."),
    429: _error(
        "RATE_LIMITED, or a model provider's rate limit.",
        {"Retry-After": "Seconds to wait, when known."},
    ),
    500: _error("INTERNAL_ERROR: a bug; the server log has the details."),
    502: _error("A model provider failed: MISTRAL_FAILED, PROVIDER_AUTH, ...; or (x402) the facilitator."),
    503: _error("The index or configuration cannot serve: INDEX_NOT_READY, CONFIG_INVALID, ..."),
}
_FILE_ERRORS = {
    400: _error("Invalid or missing arguments, or DOC_TYPE_UNSUPPORTED (e.g. lines of a PDF)."),
    403: _error("FORBIDDEN_ORIGIN, PATH_OUTSIDE_ROOT, or FORBIDDEN (excluded or secret-bearing content)."),
    404: _error("FILE_NOT_FOUND."),
    422: _error("The file cannot be served: FILE_TOO_LARGE, EXTRACT_FAILED, ..."),
}
_POST_ERRORS = {415: _error("The body is not Content-Type: application/json.")}


def _responses(tool_name: str, *extra: dict[int, JsonObject]) -> JsonObject:
    ok = {
        "description": "The tool's structured result (MCP structuredContent).",
        "headers": {
            "PAYMENT-RESPONSE": {
                "schema": {"type": "string"},
                "description": "x402: base64 JSON SettleResponse, on a paid call.",
            }
        },
        "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{_RESULT_FOR[tool_name]}"}}
        },
    }
    merged = dict(_ERRORS)
    for more in extra:
        merged.update(more)
    return {"responses": {200: ok, **dict(sorted(merged.items()))}}


def _operation(tool_name: str, operation_id: str, *extra: dict[int, JsonObject]) -> JsonObject:
    tool = tools.table()[tool_name]
    return {
        "operation_id": operation_id,
        "summary": tool.title,
        "description": f"{tool.description}\n\nThe MCP tool `{tool_name}`.",
        "tags": [TAG],
        "openapi_extra": _responses(tool_name, *extra),
    }


# -- the one way in ------------------------------------------------------------------


def run_tool(
    ctx: context.Context, tool_name: str, arguments: JsonObject, stop: threading.Event | None = None
) -> JsonObject | HttpResponse:
    """What ``tools/call`` runs (``tools.run``: validated, run, counted in the
    metrics), answered the REST way: the structured result, or the envelope.
    ``stop``: the call's stop event, set at its deadline (:func:`_in_slot`)."""
    call = tools.Call(ctx, cancel=stop or threading.Event())
    return tool_answer(tools.run(tools.table()[tool_name], arguments, call))


def tool_answer(result: JsonObject) -> JsonObject | HttpResponse:
    """A ``CallToolResult`` as the REST mirror answers it: a tool error as
    the error envelope (its §14 code and status), else ``structuredContent``
    (with an image content item's base64 as ``data``: dir2mcp.read_bytes)."""
    structured = result.get("structuredContent") or {}
    if not result.get("isError"):
        image = next((c for c in result.get("content", ()) if c.get("type") == "image"), None)
        return (structured | {"data": image["data"]}) if image else structured
    error = structured.get("error")
    failure = error if isinstance(error, dict) else {}
    code = str(failure.get("code") or errors.INTERNAL_ERROR)
    message = str(failure.get("message") or "the tool failed")
    return error_response(code, message, retryable=failure.get("retryable"))


def _context(request: HttpRequest) -> context.Context:
    """What :class:`BearerAuth` returned, which ninja puts on the request."""
    ctx: context.Context = getattr(request, "auth")  # noqa: B009 (set by ninja: not on django's HttpRequest)
    return ctx


async def _call(
    request: HttpRequest, tool_name: str, params: BaseModel | None = None
) -> JsonObject | HttpResponse:
    arguments = params.model_dump(exclude_unset=True) if params is not None else {}
    ctx = _context(request)
    if ctx.gate is not None and ctx.gate.price_for(tool_name) is not None:
        payment = request.headers.get("PAYMENT-SIGNATURE")
        route = (request.method, request.path)
        return await _in_slot(request, paid_call, ctx, tool_name, arguments, payment, route, paid=True)
    stop = threading.Event()
    return await _in_slot(request, run_tool, ctx, tool_name, arguments, stop, stop=stop)


async def _in_slot(
    request: HttpRequest,
    fn: Callable[..., _R],
    *args: object,
    paid: bool = False,
    stop: threading.Event | None = None,
) -> _R | HttpResponse:
    """``fn(*args)`` admitted as this client's call (its address and
    credential, the same client as its stateless MCP calls) on a call
    thread, under the deadline (mcp_gateway/workers.py; none for a ``paid``
    call): 503 SERVER_BUSY when not admitted, DEADLINE_EXCEEDED past the
    deadline, when ``stop`` is set: the work checks it between steps. Until
    session 23 no REST call had one set, so a tool's checks never stopped it
    and its thread held its slot for as long as the work lasted."""
    ctx = _context(request)
    bounds = workers.Bounds.of(ctx.config, paid=paid)
    peer = request.META.get("REMOTE_ADDR", "")
    client = workers.client_of(peer, request.headers.get("X-Real-IP"), ctx.auth.token)
    try:
        work = workers.start(fn, *args, bounds=bounds, client=client)
    except workers.Refused as busy:
        return error_response(busy.code, busy.message, headers={"Retry-After": "1"}, retryable=True)
    try:  # a client that hangs up cancels this wait, never ``work`` (its slot is released by its thread)
        await workers.finish(work, bounds, stop=stop)
    except workers.Overdue as overdue:
        return error_response(overdue.code, overdue.message, retryable=True)
    return work.result()


# -- x402: a route is sold like the tool it runs -------------------------------------


def paid_call(
    ctx: context.Context, tool_name: str, arguments: JsonObject, payment: str | None, route: tuple[str, str]
) -> HttpResponse:
    """A priced tool through the x402 gate (payments/gate.py), header variant.

    The same gate as ``tools/call`` on the MCP endpoint: the same price,
    replay store and audit; the challenge names this route as the resource.
    """
    # x402 and its eth libraries take ~0.6 s to import (measured): paid calls only
    from payments.gate import Route, request_hash

    tool = tools.table()[tool_name]
    gate = ctx.gate
    assert gate is not None  # _call sends a tool here only when the gate prices it
    outcome = gate.handle(
        tool_name=tool_name,
        arguments=arguments,
        header=payment or None,
        meta_payment=None,
        request_hash=request_hash(tool_name, arguments),
        run=lambda: tools.run(tool, arguments, tools.Call(ctx)),
        route=Route(*route),
    )
    return payment_response(outcome)


def payment_response(outcome: "Outcome") -> HttpResponse:  # quoted: imported for type checking only
    """The REST answer of a gate :class:`~payments.outcome.Outcome`: the tool's
    structured result (200), or the error envelope with the x402 headers."""
    kind = outcome.replay_of or outcome.kind  # a replay answers what the first request got
    result = outcome.result or {}
    if kind in ("paid", "free", "tool_error"):  # a tool error settled nothing: as without x402
        answer = tool_answer(result)
        if isinstance(answer, HttpResponse):
            response = answer
        else:  # ninja's JSON renderer never reads the request, and there is none here
            response = api.create_response(None, answer, status=200)  # type: ignore[arg-type]
    else:
        data = (outcome.error or {}).get("data") or {}
        status = outcome.http_status if outcome.http_status >= 400 else 402
        if kind == "challenge":
            message = (
                "payment required: sign what the PAYMENT-REQUIRED header asks, retry with PAYMENT-SIGNATURE"
            )
        elif kind == "failed":
            message = f"payment rejected: {outcome.reason or 'invalid_payload'}"
        else:
            message = (outcome.error or {}).get("message") or "the payment could not be processed; retry"
        code = str(data.get("code") or errors.UNAUTHORIZED)
        response = error_response(code, message, status=status, retryable=bool(data.get("retryable")))
    for name, value in outcome.headers.items():
        response[name] = value
    return response


# -- endpoints ------------------------------------------------------------------------


@api.get("/search", **_operation("dir2mcp.search", "search"))
async def search(request: HttpRequest, params: Query[SearchQuery]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.search", params)


@api.post("/search", **_operation("dir2mcp.search", "searchPost", _POST_ERRORS))
async def search_post(request: HttpRequest, body: Body[SearchBody]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.search", body)


@api.post("/ask", **_operation("dir2mcp.ask", "ask", _POST_ERRORS))
async def ask(request: HttpRequest, body: Body[AskBody]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.ask", body)


@api.get("/files", **_operation("dir2mcp.list_files", "listFiles"))
async def list_files(request: HttpRequest, params: Query[ListFilesQuery]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.list_files", params)


@api.get("/files/slice", **_operation("dir2mcp.open_file", "openFile", _FILE_ERRORS))
async def open_file(request: HttpRequest, params: Query[OpenFileQuery]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.open_file", params)


@api.get("/files/outline", **_operation("dir2mcp.outline", "outline", _FILE_ERRORS))
async def outline(request: HttpRequest, params: Query[OutlineQuery]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.outline", params)


@api.post("/files/slices", **_operation("dir2mcp.open_files", "openFiles", _POST_ERRORS))
async def open_files(request: HttpRequest, body: Body[OpenFilesBody]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.open_files", body)


@api.get("/files/checksum", **_operation("dir2mcp.checksum", "checksum", _FILE_ERRORS))
async def checksum(request: HttpRequest, params: Query[ChecksumQuery]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.checksum", params)


@api.get("/files/diff", **_operation("dir2mcp.diff", "diff", _FILE_ERRORS))
async def diff(request: HttpRequest, params: Query[DiffQuery]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.diff", params)


@api.get("/files/bytes", **_operation("dir2mcp.read_bytes", "readBytes", _FILE_ERRORS))
async def read_bytes(request: HttpRequest, params: Query[ReadBytesQuery]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.read_bytes", params)


@api.post("/verify", **_operation("dir2mcp.verify", "verify", _POST_ERRORS))
async def verify(request: HttpRequest, body: Body[VerifyBody]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.verify", body)


@api.get("/symbols", **_operation("dir2mcp.symbols", "symbols"))
async def symbols(request: HttpRequest, params: Query[SymbolsQuery]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.symbols", params)


@api.get("/references", **_operation("dir2mcp.references", "references"))
async def references(request: HttpRequest, params: Query[ReferencesQuery]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.references", params)


@api.get("/find", **_operation("dir2mcp.find", "find"))
async def find(request: HttpRequest, params: Query[FindQuery]) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.find", params)


@api.get("/stats", **_operation("dir2mcp.stats", "stats"))
async def stats(request: HttpRequest) -> JsonObject | HttpResponse:
    return await _call(request, "dir2mcp.stats")


# -- resources (issue #18): the MCP resources, read-only ----------------------------------


class ResourcesQuery(Schema):
    cursor: str | None = Field(
        None,
        min_length=1,
        max_length=8192,
        description="The nextCursor of the page before; omit it for the first page.",
    )


class ReadResourceQuery(Schema):
    uri: str = Field(
        min_length=1,
        max_length=uris.MAX_URI_CHARS,
        description=(
            "A resource URI: dir2mcp:///<path> for a whole file, or a slice as citations name it: "
            "?lines=A-B, ?page=N or ?time=A-B (milliseconds)."
        ),
    )


_RESOURCE = {
    "type": "object",
    "properties": {
        "uri": {"type": "string"},
        "name": {"type": "string"},
        "title": {"type": "string"},
        "mimeType": {"type": "string"},
        "size": {"type": "integer"},
        "annotations": {"type": "object", "properties": {"lastModified": {"type": "string"}}},
    },
    "required": ["uri", "name"],
}
_CONTENTS = {
    "type": "object",
    "properties": {
        "uri": {"type": "string"},
        "mimeType": {"type": "string"},
        "text": {"type": "string"},
        "blob": {"type": "string", "contentEncoding": "base64"},
        "_meta": {"type": "object"},
    },
    "required": ["uri"],
    "oneOf": [{"required": ["text"]}, {"required": ["blob"]}],
}
#: components/schemas of the resource routes: the MCP results, as they are
RESOURCE_SCHEMAS = {
    "Resource": _RESOURCE,
    "ResourceContents": _CONTENTS,
    "ResourceList": {
        "type": "object",
        "properties": {
            "resources": {"type": "array", "items": {"$ref": "#/components/schemas/Resource"}},
            "nextCursor": {"type": "string"},
        },
        "required": ["resources"],
    },
    "ReadResourceResult": {
        "type": "object",
        "properties": {
            "contents": {"type": "array", "items": {"$ref": "#/components/schemas/ResourceContents"}}
        },
        "required": ["contents"],
    },
}


def _resource_operation(operation_id: str, summary: str, description: str, result: str) -> JsonObject:
    ok = {
        "description": f"The MCP result of the same request ({result}).",
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{result}"}}},
    }
    codes = {**_ERRORS, **_FILE_ERRORS, 414: _error("The request line is over the 16,384-byte limit.")}
    codes = {code: codes[code] for code in (400, 401, 403, 404, 414, 422, 429, 500, 503)}
    return {
        "operation_id": operation_id,
        "summary": summary,
        "description": description,
        "tags": [TAG],
        "openapi_extra": {"responses": {200: ok, **codes}},
    }


def _resource_result(
    fn: Callable[[context.Context, _A], JsonObject], ctx: context.Context, argument: _A
) -> JsonObject | HttpResponse:
    try:
        return fn(ctx, argument)
    except resources.ResourceError as exc:
        return error_response(exc.code, exc.message, retryable=exc.data.get("retryable"))


def _read_contents(ctx: context.Context, uri: str, stop: threading.Event | None = None) -> JsonObject:
    return {"contents": resources.read(ctx, uri, stop=stop)}


@api.get(
    "/resources",
    **_resource_operation(
        "listResources",
        "List the directory's files as resources",
        "Every indexed live file as an MCP resource (uri, name, title, mimeType, size, "
        "annotations.lastModified), by path, 100 a page; follow nextCursor. Excluded and secret-bearing "
        "files never appear. The MCP method `resources/list`.",
        "ResourceList",
    ),
)
async def list_resources(request: HttpRequest, params: Query[ResourcesQuery]) -> JsonObject | HttpResponse:
    return await _in_slot(request, _resource_result, resources.list_page, _context(request), params.cursor)


@api.get(
    "/resources/read",
    **_resource_operation(
        "readResource",
        "Read a resource: a whole file or a cited slice",
        "A whole file (text; PDFs, scans and recordings as extracted text marked by page or time; other "
        "files base64 up to 1 MiB) or exactly the slice a citation names. The same refusals and codes as "
        "`dir2mcp.open_file`. The MCP method `resources/read`.",
        "ReadResourceResult",
    ),
)
async def read_resource(request: HttpRequest, params: Query[ReadResourceQuery]) -> JsonObject | HttpResponse:
    stop = threading.Event()
    read = functools.partial(_read_contents, stop=stop)
    return await _in_slot(request, _resource_result, read, _context(request), params.uri, stop=stop)
