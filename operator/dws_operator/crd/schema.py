"""pydantic JSON Schema -> Kubernetes structural OpenAPI v3 schema.

The API server only accepts *structural* schemas: every node has a type, no $ref,
no anyOf-with-null for optional fields, no `title`/`additionalProperties: false`.
This module rewrites what pydantic emits into that subset; anything it does not
know how to translate is an error rather than a silently wrong CRD.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

Schema = dict[str, Any]

#: JSON Schema keywords the API server's JSONSchemaProps understands, copied as they are.
_KEPT = (
    "type",
    "format",
    "description",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "default",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields",
)
#: Keywords pydantic emits that carry nothing the API server needs.
_DROPPED = ("title", "$defs", "examples")


class SchemaError(ValueError):
    """The models use a construct that has no structural-schema translation."""


def structural_schema(model: type[BaseModel]) -> Schema:
    """The structural schema of `model`, camelCase field names, descriptions kept."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(raw, raw.get("$defs", {}), path=model.__name__)


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Inline `$ref` (bare or wrapped in allOf); the referring node's keys win."""
    if "allOf" in node and len(node["allOf"]) == 1:
        node = {**{k: v for k, v in node.items() if k != "allOf"}, **node["allOf"][0]}
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        node = {**_resolve(target, defs), **siblings}
    return node


def _drop_null(node: Schema, defs: dict[str, Schema], path: str) -> Schema:
    """`X | None` is expressed by leaving the field out of `required`, not by null."""
    variants = [v for v in node["anyOf"] if v.get("type") != "null"]
    if len(variants) != 1:
        raise SchemaError(f"{path}: unions other than `X | None` have no structural form")
    outer = {k: v for k, v in node.items() if k != "anyOf"}
    if outer.get("default", "") is None:
        del outer["default"]
    inner = _resolve(variants[0], defs)
    # The field's own description beats the referenced model's docstring.
    return {**inner, **outer}


def _convert(node: Schema, defs: dict[str, Schema], path: str) -> Schema:
    node = _resolve(node, defs)
    if "anyOf" in node:
        node = _drop_null(node, defs, path)
        node = _resolve(node, defs)
    unknown = set(node) - {*_KEPT, *_DROPPED, "properties", "items", "additionalProperties"}
    if unknown:
        raise SchemaError(f"{path}: no structural translation for {sorted(unknown)}")
    out: Schema = {k: node[k] for k in _KEPT if k in node}
    if "type" not in out:
        raise SchemaError(f"{path}: every structural schema node needs a type")
    if "properties" in node:
        out["properties"] = {
            name: _convert(child, defs, f"{path}.{name}")
            for name, child in node["properties"].items()
        }
    if "items" in node:
        out["items"] = _convert(node["items"], defs, f"{path}[]")
    extra = node.get("additionalProperties")
    if extra is True:
        # extra="allow" models: keep fields the models do not describe (a PodSpec's).
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif isinstance(extra, dict):
        out["additionalProperties"] = _convert(extra, defs, f"{path}{{}}")
    return _order(out)


def _order(node: Schema) -> Schema:
    """Readable key order in the generated YAML: description and type first."""
    head = [k for k in ("description", "type", "format") if k in node]
    return {k: node[k] for k in (*head, *(k for k in node if k not in head))}


def at_path(schema: Schema, path: tuple[str, ...]) -> Schema:
    """The schema node of a dotted field path; a missing field is an error, not a no-op."""
    node = schema
    for part in path:
        try:
            # "[]": the items of the list at the path so far.
            node = node["items"] if part == "[]" else node["properties"][part]
        except KeyError as missing:
            raise SchemaError(f"no field {'.'.join(path)} in the schema") from missing
    return node


def resource_schema(
    description: str, spec: type[BaseModel], status: type[BaseModel] | None = None
) -> Schema:
    """The root schema of a custom resource whose `spec` (and `status`) are `spec`'s (and
    `status`'s) models."""
    properties: Schema = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": structural_schema(spec),
    }
    if status is not None:
        properties["status"] = structural_schema(status)
    return {
        "description": description,
        "type": "object",
        "required": ["spec"],
        "properties": properties,
    }
