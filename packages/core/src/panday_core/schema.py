"""JSON Schemas for the public models, rendered stably (sorted keys, trailing newline).

`tools/schemas.py` writes them to `schemas/`; the `schemas` gate fails when the committed
files differ from what the code generates.
"""

from __future__ import annotations

import json

import msgspec

from panday_core.policy import SandboxPolicy

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def public_models() -> dict[str, type[msgspec.Struct]]:
    """Schema name -> model, for every model users write or read as a document."""
    from panday_core.manifest import PluginManifest

    return {"policy": SandboxPolicy, "plugin": PluginManifest}


def json_schema(model: type[msgspec.Struct], name: str) -> dict[str, object]:
    schema: dict[str, object] = msgspec.json.schema(model)
    schema["$schema"] = SCHEMA_DIALECT
    schema["$id"] = f"https://panday.invalid/schemas/{name}.schema.json"
    return schema


def render(schema: dict[str, object]) -> str:
    return json.dumps(schema, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def rendered_schemas() -> dict[str, str]:
    """File name -> text for every public model."""
    return {
        f"{name}.schema.json": render(json_schema(model, name))
        for name, model in sorted(public_models().items())
    }
