"""Typed input contracts: what a JSON file or a request body must hold, declared as a pydantic
model in strict mode, so that a value of another type is refused instead of converted (``"false"``
is not a boolean, ``"12"`` not an offset, ``1`` not a label string, ``true`` not an integer).

- ``parse_json``: JSON as RFC 8259 defines it, and no more: ``NaN``/``Infinity`` and a key given
  twice in one object (Python's ``json`` keeps the last silently) are errors, and so is nesting
  deeper than the interpreter's recursion limit.
- ``Schema``: the base of a record's model: strict types, unknown keys ignored unless one is a
  likely misspelling of a field (``Answers`` for ``answers``), whose data would otherwise be lost.
- ``Text`` / ``NonBlank``: a JSON string that is Unicode text (no lone surrogate); ``NonBlank``
  also holds a character other than white space (a span, an answer, a type name).
- ``parse``: a value checked against a schema or type; the error names where it was read
  (``file:line``), the JSON path of the field, what was expected and what was found.

pydantic (https://docs.pydantic.dev/latest/concepts/strict_mode/) does the checking.
"""

from __future__ import annotations

import difflib
import json
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, TypeAdapter, ValidationError, model_validator

T = TypeVar("T")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (RFC 8259 has no NaN or Infinity)")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"key {twice!r} given twice in one object (which value is meant?)")
    return record


def parse_json(text: str | bytes, where: str, whole_file: bool = False) -> Any:
    """The JSON value of ``text`` (UTF-8 bytes or a string); ``whole_file``: ``where`` is a file's
    name, and a syntax error is placed at ``where:LINE`` (else ``where`` is the place already).

    Raises:
        ValueError: not UTF-8, not JSON, a NaN/Infinity constant, a duplicated key, or nesting
            too deep to decode; the message starts with ``where``.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{where}: not UTF-8 (byte 0x{text[err.start]:02x} at offset {err.start})") from None
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as err:
        if whole_file:
            raise ValueError(f"{where}:{err.lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
        raise ValueError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deep for a record") from None


def _unicode(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"a lone surrogate U+{ord(value[err.start]):04X} at character {err.start} is not text"
        ) from None
    return value


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("expected text with a character other than white space")
    return value


Text = Annotated[str, AfterValidator(_unicode)]
"""A JSON string that is Unicode text (no lone surrogate)."""
NonBlank = Annotated[str, AfterValidator(_unicode), AfterValidator(_non_blank)]
"""A ``Text`` with a character other than white space."""


class Schema(BaseModel):
    """A record's declared fields: strict types (no conversion between JSON types), frozen, other
    keys ignored unless one is a close misspelling of a field (then an error, see ``parse``)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _misspelt(cls, value: Any) -> Any:
        if isinstance(value, dict):
            known = [info.alias or name for name, info in cls.model_fields.items()]
            for key in value:
                if key in known or not isinstance(key, str):
                    continue
                close = difflib.get_close_matches(key.lower(), known, n=1, cutoff=0.75)
                if close and close[0] not in value:
                    raise ValueError(f"unknown key {key!r} (did you mean {close[0]!r}?)")
        return value


EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "missing": "a value (the field is missing)",
    "none_required": "null",
}


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (``a boolean``, ``a string`` …)."""
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string")):
        if isinstance(value, kind):
            shown = json.dumps(value, ensure_ascii=False)[:40]
            if not shown.encode("utf-8", "replace").decode("utf-8") == shown:  # a lone surrogate: escaped
                shown = json.dumps(value)[:40]
            return f"{name} {shown}"
    return {list: "an array", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def json_path(location: tuple[Any, ...]) -> str:
    """``("answers", 0, "text")`` as ``answers[0].text``; union members pydantic names are dropped."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not any(c in part for c in "[]()") and not part.startswith(("function-", "str", "int", "list")):
            path += f".{part}" if path else part
    return path


def describe(err: ValidationError, limit: int = 3) -> str:
    """The first ``limit`` fields a validation error finds fault with, as one line (the members
    of a union are listed as one expectation: ``expected a string or an integer``)."""
    found: dict[str, tuple[list[str], Any]] = {}
    for item in err.errors():
        path = json_path(item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            found.setdefault(path, ([], None))[0].append("missing")
            continue
        expected = EXPECTED.get(item["type"]) or (
            message.removeprefix("Input should be ") if message.startswith("Input should be ") else None
        )
        found.setdefault(path, ([], item["input"]))[0].append(f"expected {expected}" if expected else message)
    problems = []
    for path, (messages, value) in list(found.items())[:limit]:
        # a union member of the value's type that refused it says why; else every member's type
        why = [m for m in messages if not m.startswith("expected ") and m != "missing"]
        expected = [m.removeprefix("expected ") for m in messages if m.startswith("expected ")]
        if why or messages == ["missing"]:
            message = "; ".join(dict.fromkeys(why or messages))
        else:
            message = f"expected {' or '.join(dict.fromkeys(expected))}"
        got = f", got {json_type(value)}" if message.startswith("expected") else ""
        problems.append(f"{path}: {message}{got}" if path else f"{message}{got}")
    more = len(found) - limit
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def parse(schema: type[T] | Any, value: Any, where: str) -> T:
    """``value`` checked against ``schema`` (a ``Schema`` subclass or any type pydantic knows,
    such as ``list[NonBlank]``), in strict mode.

    Raises:
        ValueError: ``where: PATH: expected TYPE, got VALUE`` for the first problems found.
    """
    try:
        return _adapter(schema).validate_python(value, strict=True)
    except ValidationError as err:
        problem = describe(err)
        raise ValueError(f"{where}{'' if problem.startswith('[') else ': '}{problem}") from None


_ADAPTERS: dict[Any, TypeAdapter] = {}


def _adapter(schema: Any) -> TypeAdapter:
    if schema not in _ADAPTERS:
        _ADAPTERS[schema] = TypeAdapter(schema)
    return _ADAPTERS[schema]
