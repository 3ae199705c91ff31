"""Structured outputs: build a JSON value that fits a requested JSON schema from a judgement.

Used for OpenAI ``response_format`` (``json_schema``/``json_object``), OpenAI function tools,
Anthropic ``tool_use`` and Anthropic ``output_config.format``. Properties are filled by name:

* ``score``/``rating``/``grade``/... -> the judgement's score (pairwise: the graded preference
  for response 1), coerced to the schema's ``integer``/``number``/``string`` type;
* ``explanation``/``reasoning``/``rationale``/... -> the explanation text;
* ``verdict``/``winner``/``preference``/... -> the verdict, mapped onto an ``enum`` if the schema
  has one (``"A"``, ``"Response 1 is better"``, ``"1"``, ``"tie"`` ... whichever the enum offers).

Every other property is filled with a type-correct placeholder so strict schemas (all
properties required, ``additionalProperties: false``) still validate. ``$ref`` into
``$defs``/``definitions``, ``anyOf``/``oneOf`` (first non-null branch) and nested objects and
arrays are followed; that covers what the OpenAI SDK generates from pydantic models.
"""

from __future__ import annotations

from typing import Any

from .behaviour import Judgement

_SCORE_NAMES = {"score", "rating", "grade", "overall_score", "score_value", "value", "points"}
_EXPLANATION_NAMES = {
    "explanation",
    "reasoning",
    "rationale",
    "justification",
    "reason",
    "feedback",
    "analysis",
    "comment",
    "comments",
    "thoughts",
}
_VERDICT_NAMES = {
    "verdict",
    "winner",
    "preference",
    "choice",
    "decision",
    "better_response",
    "label",
    "result",
}
_MAX_DEPTH = 8


def default_object(judgement: Judgement) -> dict[str, Any]:
    """The object returned for ``json_object`` mode (no schema given)."""
    score: float | int = int(judgement.score) if float(judgement.score).is_integer() else judgement.score
    out: dict[str, Any] = {"score": score, "explanation": judgement.explanation}
    if judgement.kind == "pairwise":
        out["verdict"] = judgement.verdict
    return out


def _resolve(schema: Any, root: dict[str, Any]) -> dict[str, Any]:
    """Follow local ``$ref`` pointers (``#/$defs/X``, ``#/definitions/X``)."""
    seen = 0
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and seen < _MAX_DEPTH:
        ref: str = schema["$ref"]
        target: Any = root
        for part in ref.lstrip("#/").split("/") if ref.startswith("#") else []:
            target = target.get(part, {}) if isinstance(target, dict) else {}
        schema = target
        seen += 1
    return schema if isinstance(schema, dict) else {}


def _schema_type(schema: dict[str, Any]) -> str | None:
    t = schema.get("type")
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        return non_null[0] if non_null else "null"
    if isinstance(t, str):
        return t
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def _coerce_number(value: float, typ: str | None) -> Any:
    if typ == "integer":
        return round(value)
    if typ == "string":
        return str(int(value)) if float(value).is_integer() else str(value)
    if typ == "number":
        return int(value) if float(value).is_integer() else value
    return int(value) if float(value).is_integer() else value


def _pick_enum(options: list[Any], judgement: Judgement) -> Any:
    """Choose the enum member that best expresses the verdict (or the score for numeric enums)."""
    if not options:
        return None
    if all(isinstance(o, (int, float)) and not isinstance(o, bool) for o in options):
        return min(options, key=lambda o: abs(o - judgement.score))
    candidates = [judgement.verdict, judgement.verdict_token, f"[[{judgement.verdict_token}]]"]
    token = judgement.verdict_token
    candidates += {
        "1": ["A", "response_1", "response 1", "model_a", "first"],
        "2": ["B", "response_2", "response 2", "model_b", "second"],
        "A": ["1", "response_1", "model_a"],
        "B": ["2", "response_2", "model_b"],
        "C": ["tie", "draw", "equal"],
        "tie": ["C", "draw", "equal", "tie"],
    }.get(token, [])
    lowered = {str(o).lower(): o for o in options}
    for cand in candidates:
        if cand and cand.lower() in lowered:
            return lowered[cand.lower()]
    for cand in candidates:
        for opt in options:
            if cand and isinstance(opt, str) and cand.lower() in opt.lower():
                return opt
    return options[0]


def _placeholder(schema: dict[str, Any], root: dict[str, Any], judgement: Judgement, depth: int) -> Any:
    """A type-correct value for a property the judge has no meaning for."""
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("enum"), list):
        return _pick_enum(schema["enum"], judgement)
    typ = _schema_type(schema)
    if typ == "object":
        return fill_schema(schema, judgement, root, depth + 1)
    if typ == "array":
        return []
    return {"string": "", "integer": 0, "number": 0, "boolean": False, "null": None}.get(typ or "string", "")


def _value_for(name: str, schema: dict[str, Any], root: dict[str, Any], judgement: Judgement, depth: int) -> Any:
    schema = _first_branch(_resolve(schema, root), root)
    key = name.lower()
    typ = _schema_type(schema)
    enum = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if key in _VERDICT_NAMES or (key in _SCORE_NAMES and judgement.kind == "pairwise" and typ == "string"):
        if enum:
            return _pick_enum(enum, judgement)
        if typ in ("integer", "number"):
            return _coerce_number(judgement.score, typ)
        return judgement.verdict or judgement.verdict_token
    if key in _SCORE_NAMES:
        if enum:
            return _pick_enum(enum, judgement)
        return _coerce_number(judgement.score, typ)
    if key in _EXPLANATION_NAMES and typ in (None, "string"):
        return judgement.explanation
    return _placeholder(schema, root, judgement, depth)


def _first_branch(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            resolved = [_resolve(b, root) for b in branches]
            non_null = [b for b in resolved if _schema_type(b) != "null"]
            return non_null[0] if non_null else resolved[0]
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1:
        return _resolve(all_of[0], root)
    return schema


def fill_schema(
    schema: dict[str, Any], judgement: Judgement, root: dict[str, Any] | None = None, depth: int = 0
) -> Any:
    """A JSON value matching ``schema`` carrying the judgement's score/explanation/verdict."""
    root = schema if root is None else root
    schema = _first_branch(_resolve(schema, root), root)
    if depth > _MAX_DEPTH:
        return {}
    if _schema_type(schema) != "object" and "properties" not in schema:
        if _schema_type(schema) is None and not schema:
            return default_object(judgement)
        return _placeholder(schema, root, judgement, depth)
    props = schema.get("properties")
    if not isinstance(props, dict) or not props:
        return default_object(judgement)
    return {name: _value_for(name, sub, root, judgement, depth) for name, sub in props.items()}
