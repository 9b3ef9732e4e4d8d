"""The Kubernetes API models' view of a manifest, in a process of its own: `python -m tests.unit.k8s_models` reads
[[model, document], ...] as JSON on stdin and prints, for each, the list of what is wrong with it.

The kubernetes package costs ~35 MB of memory once imported; in the test process it would stay for the whole
session and count in every child's peak RSS that the hardening tier bounds (tests/hardening/conftest.py)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import kubernetes.client

PRIMITIVE = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float), "object": (int, str, dict, list)}


def strict(data: Any, kind: str, where: str = "") -> list[str]:
    """Every key of `data` must be a field of the model `kind` (by its JSON name), recursively; the types match."""
    if kind in PRIMITIVE:
        ok = isinstance(data, PRIMITIVE[kind]) and not (kind == "int" and isinstance(data, bool))
        return [] if ok else [f"{where}: {data!r} is not {kind}"]
    if kind == "datetime":
        return []
    if m := re.fullmatch(r"List\[(.+)\]", kind):
        if not isinstance(data, list):
            return [f"{where}: not a list"]
        return [e for i, item in enumerate(data) for e in strict(item, m.group(1), f"{where}[{i}]")]
    if m := re.fullmatch(r"Dict\[str, (.+)\]", kind):
        if not isinstance(data, dict):
            return [f"{where}: not a mapping"]
        return [e for k, v in data.items() for e in strict(v, m.group(1), f"{where}.{k}")]
    model = getattr(kubernetes.client, kind)
    if not isinstance(data, dict):
        return [f"{where}: not a {kind}"]
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    errors = []
    for key, value in data.items():
        if key not in by_json:
            errors.append(f"{where}.{key}: no such field in {kind}")
        else:
            errors += strict(value, model.openapi_types[by_json[key]], f"{where}.{key}")
    return errors


def check(model: str, doc: dict) -> list[str]:
    """The strict walk, then the models' own checks (required fields, enums)."""
    errors = strict(doc, model)
    if not errors:
        try:
            kubernetes.client.ApiClient()._ApiClient__deserialize(doc, model)  # the public one wants a response
        except (ValueError, TypeError) as err:
            errors.append(f"{model}: {err}")
    return errors


if __name__ == "__main__":
    json.dump([check(model, doc) for model, doc in json.load(sys.stdin)], sys.stdout)
