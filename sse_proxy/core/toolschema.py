"""The JSON Schemas a request declares for its tools, and the first error of a call against one.

Sans-IO like the rest of the core: the shell hands in the request body it already parsed
(for the model), this reads the tool declarations of every dialect out of it, and a call's
finished arguments are checked against the schema of the tool it names. Validation is
jsonschema's (the draft the schema names, 2020-12 otherwise; no remote ``$ref`` is ever
fetched), built on first use, so a request that declares a hundred tools and calls one pays
for one. What an error says comes from the schema (its path, its keyword, the values it
allows) and never from the arguments, which are model output and stay out of the logs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Final

__all__ = ["MAX_TOOLS", "VALIDATE_LIMIT", "ToolSchemas"]

MAX_TOOLS: Final = 128
"""Tool declarations read from one request; OpenAI's own limit, and plenty for anyone."""
VALIDATE_LIMIT: Final = 256 << 10
"""Arguments longer than this (characters) are checked for JSON only, not against a schema."""

_GEMINI_TYPES = frozenset({"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"})
_SHORT = 200


def _declarations(body: Mapping[str, Any]) -> Iterator[tuple[object, object]]:
    """(name, JSON Schema) of every function tool the body declares, in any dialect."""
    tools = body.get("tools")
    for tool in tools if type(tools) is list else ():
        if type(tool) is not dict:
            continue
        fn = tool.get("function")
        if type(fn) is dict:  # OpenAI Chat Completions
            yield fn.get("name"), fn.get("parameters")
        elif "input_schema" in tool:  # Anthropic Messages
            yield tool.get("name"), tool.get("input_schema")
        elif tool.get("type") == "function":  # OpenAI Responses
            yield tool.get("name"), tool.get("parameters")
        decls = tool.get("functionDeclarations", tool.get("function_declarations"))
        for decl in decls if type(decls) is list else ():  # Gemini / Vertex AI
            if type(decl) is not dict:
                continue
            schema = decl.get("parametersJsonSchema", decl.get("parameters_json_schema"))
            if schema is None:
                schema = _openapi_types(decl.get("parameters"))
            yield decl.get("name"), schema
    functions = body.get("functions")  # the older OpenAI function-calling field
    for fn in functions if type(functions) is list else ():
        if type(fn) is dict:
            yield fn.get("name"), fn.get("parameters")


def _openapi_types(schema: object, depth: int = 0) -> object:
    """Gemini's ``parameters`` (an OpenAPI subset) as JSON Schema: its ``type`` values are
    the enum names ``STRING``, ``OBJECT``... which JSON Schema spells in lower case."""
    if depth > 64:
        return schema
    if type(schema) is dict:
        out = {k: _openapi_types(v, depth + 1) for k, v in schema.items()}
        kind = schema.get("type")
        if type(kind) is str and kind in _GEMINI_TYPES:
            out["type"] = kind.lower()
        return out
    if type(schema) is list:
        return [_openapi_types(v, depth + 1) for v in schema]
    return schema


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(error: Any) -> str:
    """One line about a jsonschema error, from the schema's side only."""
    keyword = str(error.validator)
    value = error.validator_value
    where = "/".join(str(p) for p in error.schema_path) or "(root)"
    if keyword == "required" and type(value) is list:
        have = error.instance if type(error.instance) is dict else {}
        missing = [n for n in value if n not in have]
        detail = f"required property {_short(missing[0] if missing else value)} is missing"
    elif keyword == "type":
        detail = f"a value is not of type {_short(value)}"
    elif keyword == "enum" and type(value) is list:
        detail = f"a value is none of the {len(value)} the schema allows"
    elif keyword in ("additionalProperties", "unevaluatedProperties") and value is False:
        detail = "a property the schema does not declare"
    elif keyword in ("properties", "items", "anyOf", "oneOf", "allOf", "not"):
        detail = f"{keyword} does not match"
    else:
        detail = f"{keyword} {_short(value)} is not met"
    return f"{detail} (schema path {where})"[:_SHORT]


class ToolSchemas:
    """The request's tool schemas by name; :meth:`check` validates one call's arguments."""

    __slots__ = ("_schemas", "_validators")

    def __init__(self, schemas: Mapping[str, dict[str, Any]]) -> None:
        self._schemas = dict(schemas)
        self._validators: dict[str, Any] = {}

    @classmethod
    def from_request(cls, body: object) -> ToolSchemas | None:
        """The schemas a parsed request body declares (``None``: it declares none)."""
        if type(body) is not dict:
            return None
        schemas: dict[str, dict[str, Any]] = {}
        for name, schema in _declarations(body):
            if len(schemas) >= MAX_TOOLS:
                break
            if type(name) is str and name and type(schema) is dict:
                schemas.setdefault(name, schema)
        return cls(schemas) if schemas else None

    def __contains__(self, name: object) -> bool:
        return name in self._schemas

    def __len__(self) -> int:
        return len(self._schemas)

    def check(self, name: str | None, arguments: object) -> str | None:
        """The first error of ``arguments`` against tool ``name``'s schema, or None (valid,
        no schema for that tool, or a schema that cannot be used: invalid, or a ``$ref``
        that would need fetching)."""
        if name is None or name not in self._schemas:
            return None
        validator = self._validator(name)
        if validator is None:
            return None
        from jsonschema.exceptions import best_match
        from referencing.exceptions import Unresolvable

        try:
            error = best_match(validator.iter_errors(arguments))
        except (Unresolvable, RecursionError):
            return None
        return None if error is None else _describe(error)

    def _validator(self, name: str) -> Any:
        if name in self._validators:
            return self._validators[name]
        from jsonschema import validators
        from jsonschema.exceptions import SchemaError

        schema = self._schemas[name]
        validator: Any = None
        try:
            cls = validators.validator_for(schema, default=validators.Draft202012Validator)
            cls.check_schema(schema)
            validator = cls(schema)
        except (SchemaError, RecursionError):
            validator = None  # a schema the API would refuse too; nothing to check against
        self._validators[name] = validator
        return validator
