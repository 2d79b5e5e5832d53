"""A Proctor tool as a typed Python method: signature and Google-style docstring built from the
tool's argument model, so trainers that turn functions into tool schemas (TRL and transformers'
`get_json_schema`, among others) offer the model exactly the tool the Episode runs.

The method calls `self._call_tool(name, arguments)`; the class that holds it decides what that is."""

from __future__ import annotations

import inspect
from typing import Any

from ..tools.base import Tool

_JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


def _python_type(schema: dict[str, Any]) -> Any:
    options = schema.get("anyOf")
    if options:
        types = [_python_type(o) for o in options if o.get("type") != "null"]
        base = types[0] if len(types) == 1 else Any
        return base | None if any(o.get("type") == "null" for o in options) and base is not Any else base
    return _JSON_TYPES.get(schema.get("type", ""), Any)


def tool_method(tool: Tool):
    """`def NAME(self, arg: T, ...) -> str` for `tool`, documented from its schema."""
    schema = tool.parameters
    properties: dict[str, dict[str, Any]] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    doc_args = []
    # Python wants the required parameters first.
    for name, prop in sorted(properties.items(), key=lambda item: item[0] not in required):
        annotations[name] = _python_type(prop)
        default = inspect.Parameter.empty if name in required else prop.get("default")
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=default, annotation=annotations[name]))
        description = " ".join(str(prop.get("description") or name).split())
        doc_args.append(f"    {name}: {description}")
    name = tool.name

    def method(self, *args: Any, **kwargs: Any) -> str:
        try:
            bound = method.__signature__.bind(self, *args, **kwargs)
        except TypeError as exc:  # the trainer's parser passed a missing or unknown argument
            return f"[error] {name}: {exc}"
        arguments = {k: v for k, v in bound.arguments.items() if k != "self" and v is not None}
        return self._call_tool(name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(params, return_annotation=str)
    method.__annotations__ = {**annotations, "return": str}
    method.__doc__ = " ".join(tool.description.split()) + ("\n\nArgs:\n" + "\n".join(doc_args) if doc_args else "") + \
        "\n\nReturns:\n    What the tool printed, or why it could not run."
    return method
