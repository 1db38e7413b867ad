"""Python functions as codemode tools: the spec (name, description, JSON Schema) from a function's
signature, docstring and type hints, and the adapter the native runtime calls."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any, Callable

__all__ = ["Tool", "tool", "as_tool"]

_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    dict: {"type": "object"},
    list: {"type": "array"},
    type(None): {"type": "null"},
}


def _basic_schema(annotation: Any) -> dict[str, Any]:
    """A JSON Schema for an annotation without Pydantic: the built-in scalar and container types,
    ``Optional``/``Union``, ``list[X]`` and ``dict[str, X]``; anything else is unconstrained."""
    if annotation in _SIMPLE:
        return dict(_SIMPLE[annotation])
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or (origin is not None and getattr(origin, "__name__", "") == "UnionType"):
        return {"anyOf": [_basic_schema(a) for a in args]}
    if origin in (list, tuple, set, frozenset) and args:
        return {"type": "array", "items": _basic_schema(args[0])}
    if origin is dict and len(args) == 2:
        return {"type": "object", "additionalProperties": _basic_schema(args[1])}
    if origin is typing.Literal:
        return {"enum": list(args)}
    return {}


#: The parameter through which a tool function receives who calls it: ``{"runId", "requestId",
#: "toolId", "session", "idempotencyKey"}``. ``idempotencyKey`` is the same when the call is issued
#: again (after the process running it was lost) or replayed (a fleet replica taking the run over):
#: a downstream service can use it to make its side effect happen once.
CALL_INFO = "call_info"


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return inspect.cleandoc(doc).split("\n\n", 1)[0].strip()


def _jsonable(value: Any) -> Any:
    """Pydantic models (and lists of them) become their JSON form; everything else is returned as
    it is, and the native side refuses what is not JSON with a clear error."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, list) and value and callable(getattr(value[0], "model_dump", None)):
        return [v.model_dump(mode="json") if callable(getattr(v, "model_dump", None)) else v for v in value]
    return value


@dataclasses.dataclass
class Tool:
    """A Python function as a codemode tool.

    The guest calls it as ``tools.<name>(input)`` (or by its catalog id ``plugin:<owner>:<name>``);
    the input object's keys become the function's keyword arguments and its return value must be
    JSON (a dict, list, str, int, finite float, bool or None; a Pydantic model is dumped to JSON).
    An exception becomes a ``ToolError`` in the guest, coded ``nested_tool_failed``, whose message
    is ``"<ExceptionType>: <message>"``.
    """

    function: Callable[..., Any]
    name: str
    description: str = ""
    input_schema: dict[str, Any] = dataclasses.field(default_factory=lambda: {"type": "object", "properties": {}})
    output_schema: dict[str, Any] | None = None
    read_only: bool = False
    owner: str | None = None
    inline: bool = False
    _validator: Any = None
    # (function, is async, takes ``call_info``), worked out once per function: ``inspect.signature``
    # on every call cost more than a quick tool's whole call.
    _shape_of: Any = dataclasses.field(default=None, repr=False, compare=False)

    def spec(self) -> dict[str, Any]:
        """The spec the native runtime takes."""
        spec: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "readOnly": self.read_only,
        }
        if self.output_schema is not None:
            spec["outputSchema"] = self.output_schema
        if self.owner is not None:
            spec["owner"] = self.owner
        return spec

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.function)

    @property
    def mode(self) -> str:
        """How the native runtime calls it: ``async`` (on the event loop), ``inline`` (on the
        guest's thread) or ``sync`` (on a worker thread)."""
        if self.is_async:
            return "async"
        return "inline" if self.inline else "sync"

    def invoke(self, input: dict[str, Any], info: dict[str, Any]) -> Any:
        """What the native runtime calls (``info``: run id, request id, tool id, session and the
        call's idempotency key). A function with a ``call_info`` parameter receives ``info`` there
        (it is not part of the tool's input schema)."""
        kwargs = input if isinstance(input, dict) else {}
        if self._validator is not None:
            model = self._validator.model_validate(kwargs)
            extra = model.model_extra or {}
            kwargs = {**{name: getattr(model, name) for name in type(model).model_fields}, **extra}
        is_async, wants_info = self._shape()
        if wants_info:
            kwargs = {**kwargs, CALL_INFO: info}
        if is_async:
            return self._finish(self.function(**kwargs))
        return _jsonable(self.function(**kwargs))

    def _shape(self) -> tuple[bool, bool]:
        """Whether the function is async and whether it takes ``call_info`` (see ``_shape_of``)."""
        shape = self._shape_of
        if shape is None or shape[0] is not self.function:
            fn = self.function
            try:
                wants_info = CALL_INFO in inspect.signature(fn).parameters
            except (TypeError, ValueError):  # no signature to read (some builtins): no call_info
                wants_info = False
            shape = (fn, inspect.iscoroutinefunction(fn), wants_info)
            self._shape_of = shape
        return shape[1], shape[2]

    async def _finish(self, pending: Any) -> Any:
        return _jsonable(await pending)


def _from_signature(fn: Callable[..., Any]) -> tuple[dict[str, Any], Any]:
    """The input schema of ``fn``'s keyword parameters (through Pydantic when it is installed, which
    also validates and converts inputs to the annotated types), and the Pydantic model or None."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to the raw annotations
        hints = {n: p.annotation for n, p in sig.parameters.items() if p.annotation is not p.empty}
    positional = [p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_ONLY]
    if positional:
        raise TypeError(
            f"tool {getattr(fn, '__name__', 'tool')}: positional-only parameters ({', '.join(positional)}) cannot "
            "receive the input's keys; make them keyword parameters"
        )
    params = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != CALL_INFO
    ]
    # `**kwargs`: the input is an open object, every key not named by a parameter goes there (typed
    # by its annotation, checked by the runtime before the call).
    var_kw = next((p for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD), None)
    extra_type: Any = hints.get(var_kw.name, Any) if var_kw is not None else Any
    try:
        import pydantic
    except ImportError:
        pydantic = None  # type: ignore[assignment]
    if pydantic is not None:
        fields: dict[str, Any] = {}
        for p in params:
            annotation = hints.get(p.name, Any)
            fields[p.name] = (annotation, ... if p.default is p.empty else p.default)
        config = pydantic.ConfigDict(extra="allow" if var_kw is not None else "ignore")
        model = pydantic.create_model(f"{getattr(fn, '__name__', 'tool')}_input", __config__=config, **fields)
        schema = model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            if isinstance(prop, dict):
                prop.pop("title", None)
        schema.setdefault("properties", {})
        if var_kw is not None:
            extra_schema = pydantic.TypeAdapter(extra_type).json_schema() if extra_type is not Any else True
            if isinstance(extra_schema, dict):
                extra_schema.pop("title", None)
            schema["additionalProperties"] = extra_schema if extra_schema != {} else True
        return schema, model
    properties = {p.name: _basic_schema(hints.get(p.name, Any)) for p in params}
    required = [p.name for p in params if p.default is p.empty]
    basic: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        basic["required"] = required
    if var_kw is not None:
        basic["additionalProperties"] = _basic_schema(extra_type) or True
    return basic, None


@typing.overload
def tool(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
    read_only: bool = False,
    owner: str | None = None,
    inline: bool = False,
) -> Tool: ...


@typing.overload
def tool(
    function: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
    read_only: bool = False,
    owner: str | None = None,
    inline: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
    read_only: bool = False,
    owner: str | None = None,
    inline: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declares a function as a tool (usable bare, ``@tool``, or with options, ``@tool(read_only=True)``).

    - ``name``: the guest's ``tools.<name>`` (default: the function's name);
    - ``description``: default: the first paragraph of the docstring;
    - ``input_schema``: a JSON Schema of the input object (default: from the signature's type hints,
      through Pydantic when installed). A ``**kwargs`` parameter makes it an open object: the keys
      no parameter names go there (``additionalProperties`` typed by its annotation). Positional-only
      parameters are refused (``TypeError``): an input's keys can only be passed by name;
    - ``output_schema``: a JSON Schema of the result (shown to the model in the tool's type);
    - ``read_only``: the tool has no side effects, so a resuming process may repeat a lost call and
      ``restartSafe`` cells may call it;
    - ``owner``: the middle part of the catalog id ``plugin:<owner>:<name>`` (default ``python``);
    - ``inline``: (a plain ``def`` only) run on the sandbox's own thread while the program waits for
      it: no thread switch, the fastest call, for quick pure functions. While it runs the run
      cannot suspend: one that overruns ``timeoutMs`` fails the run with ``timeout`` when it
      returns, and one that never returns holds its ``exec``.
      Without it, a plain function runs on a worker thread and a slow one leaves the run
      ``waiting``; an ``async def`` runs on the event loop that called ``exec``/``wait``.
    """

    def make(fn: Callable[..., Any]) -> Tool:
        if not callable(fn):
            raise TypeError(f"a tool must be callable, got {type(fn).__name__}")
        if inline and inspect.iscoroutinefunction(fn):
            raise TypeError("inline=True is for plain functions; an async def runs on the event loop")
        schema, validator = (input_schema, None) if input_schema is not None else _from_signature(fn)
        return Tool(
            function=fn,
            name=name or str(getattr(fn, "__name__", "tool")),
            description=description if description is not None else _first_paragraph(inspect.getdoc(fn)),
            input_schema=schema,
            output_schema=output_schema,
            read_only=read_only,
            owner=owner,
            inline=inline,
            _validator=validator,
        )

    if function is not None:
        return make(function)
    return make


def as_tool(item: Any) -> Tool:
    """A :class:`Tool` as it is, or a plain function declared with the defaults."""
    if isinstance(item, Tool):
        return item
    if callable(item):
        function: Callable[..., Any] = item
        return tool(function)
    raise TypeError(f"tools must be functions or codemode.Tool objects, got {type(item).__name__}")
