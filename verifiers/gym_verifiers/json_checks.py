"""JSON answers: find the JSON value in a response, check it parses, and check it against a JSON Schema.

Named `json_checks` so that it never shadows the standard library's `json`.

Extraction (`extract_json`), first that applies:

1. a fenced block (```` ```json ... ``` ```` or a bare ```` ``` ````): the *last* one, which must parse;
2. the whole response, stripped;
3. the last complete object or array embedded in prose (scanning at most `MAX_SCAN_ATTEMPTS` starts).

Parsing is strict JSON: `NaN` and `Infinity` are refused, and so are duplicate keys (`{"a": 1, "a": 2}`
has two readings). Nesting too deep for the parser and integers too long to convert count as invalid,
never as an exception.

Scores of `json_schema_match` (the partial credit, documented here once):

- 1.0: the value conforms to the schema;
- 0.5 x the share of the schema's top-level `required` properties that are present and valid against
  their own subschema: JSON that does not conform, with `partial_credit=True` (0 when the schema
  requires nothing or the value is not an object);
- 0.0: JSON that does not conform with `partial_credit=False`, or no JSON at all.

So a non-conforming answer never scores above 0.5 and a conforming one always scores 1.0. A schema that is
itself invalid is the task's fault: failure `invalid_reference`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from referencing.exceptions import Unresolvable

from gym_verifiers.format import MAX_TEXT_CHARS
from gym_verifiers.result import Failure, VerifierResult

__all__ = ["ExtractedJSON", "JSONNotFound", "extract_json", "json_schema_match", "json_valid"]

MAX_SCAN_ATTEMPTS = 64
PARTIAL_CREDIT_CAP = 0.5

_FENCE = re.compile(r"```[ \t]*(?:json5?|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
_OPENERS = re.compile(r"[{\[]")


class JSONNotFound(ValueError):
    """The response holds no parseable JSON value; the message says what was wrong."""


@dataclass(frozen=True, slots=True)
class ExtractedJSON:
    """A JSON value found in a response, and where: `fenced`, `raw` (the whole response) or `embedded`."""

    value: Any
    source: Literal["fenced", "raw", "embedded"]


def extract_json(text: str) -> ExtractedJSON:
    """The response's JSON value, found as the module docstring describes.

    Raises:
        JSONNotFound: nothing parses (or the last fenced block does not).
    """
    if len(text) > MAX_TEXT_CHARS:
        raise JSONNotFound(f"response longer than {MAX_TEXT_CHARS} characters")
    fenced = _FENCE.findall(text)
    if fenced:
        return ExtractedJSON(_loads(fenced[-1], "the last fenced block"), "fenced")
    try:
        return ExtractedJSON(_loads(text.strip(), "the response"), "raw")
    except JSONNotFound as exc:
        whole_error = exc
    found: Any = None
    attempts, position = 0, 0
    while attempts < MAX_SCAN_ATTEMPTS and (opener := _OPENERS.search(text, position)) is not None:
        attempts += 1
        try:
            found, end = _decode_at(text, opener.start())
        except (ValueError, RecursionError):
            position = opener.start() + 1
            continue
        position = end
    if found is None:
        raise whole_error
    return ExtractedJSON(found, "embedded")


def json_valid(response: str) -> VerifierResult:
    """1.0 when the response holds a strict JSON value (see `extract_json`)."""
    try:
        extracted = extract_json(response)
    except JSONNotFound as exc:
        return VerifierResult.zero(str(exc), {"parsed": 0.0})
    return VerifierResult.binary(True, f"valid JSON ({extracted.source})", {"parsed": 1.0})


def json_schema_match(
    response: str, schema: Mapping[str, Any] | bool, *, partial_credit: bool = True
) -> VerifierResult:
    """Score the response's JSON against `schema` (any draft, 2020-12 by default); see the table above."""
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
    except (SchemaError, TypeError, ValueError) as exc:
        return VerifierResult.zero(
            f"invalid schema: {str(exc).splitlines()[0]}", failure=Failure.INVALID_REFERENCE
        )
    try:
        value = extract_json(response).value
    except JSONNotFound as exc:
        return VerifierResult.zero(str(exc), {"parsed": 0.0, "schema_valid": 0.0, "required_fields": 0.0})
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except Unresolvable as exc:
        return VerifierResult.zero(
            f"the schema has an unresolvable $ref: {exc}", failure=Failure.INVALID_REFERENCE
        )
    if error is None:
        return VerifierResult.binary(
            True, "conforms to the schema", {"parsed": 1.0, "schema_valid": 1.0, "required_fields": 1.0}
        )
    fields = _required_share(validator, value)
    where = "/".join(str(part) for part in error.absolute_path) or "(root)"
    score = PARTIAL_CREDIT_CAP * fields if partial_credit else 0.0
    return VerifierResult(
        score,
        {"parsed": 1.0, "schema_valid": 0.0, "required_fields": fields},
        f"does not conform at {where}: {error.message[:200]}",
    )


@lru_cache(maxsize=256)
def _validator(canonical_schema: str) -> Validator:
    """A checked validator per distinct schema, cached by the schema's canonical JSON text."""
    schema = json.loads(canonical_schema)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _required_share(validator: Validator, value: Any) -> float:
    """The share of the top-level required properties that are present and valid on their own."""
    schema = validator.schema
    if not isinstance(schema, Mapping) or not isinstance(value, dict):
        return 0.0
    required = schema.get("required", [])
    if not required:
        return 0.0
    properties = schema.get("properties", {})
    good = 0
    for name in required:
        if name not in value:
            continue
        subschema = properties.get(name, True)
        try:
            good += bool(validator.evolve(schema=subschema).is_valid(value[name]))
        except Unresolvable:
            continue  # an unresolvable $ref inside the subschema: no credit for this field
    return good / len(required)


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError as exc:
        raise JSONNotFound(f"{what} nests too deeply to parse") from exc
    except ValueError as exc:  # JSONDecodeError, duplicate keys, NaN, over-long integers
        raise JSONNotFound(f"{what} is not valid JSON: {str(exc)[:120]}") from exc


def _decode_at(text: str, start: int) -> tuple[Any, int]:
    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    return decoder.raw_decode(text, start)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key[:40]!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
