"""A downstream server's JSON schemas, checked within bounds: its tools' input schemas against a run's
arguments (the broker), its output schemas against its own results (the connection). Both happen on
the event loop every run shares, and the server wrote the schemas, a run the arguments: nothing here
may take long, whatever either holds.

- Keywords whose cost the instance chooses are not checked: `pattern` and `patternProperties` (a
  pattern may backtrack), `uniqueItems` (quadratic over unhashable items); nor
  `additionalProperties`/`unevaluatedProperties` where the schema has `patternProperties` (telling
  which names are additional runs its patterns).
- No `$ref` is followed off the page: no registry to fetch a URL or read a file from.
- Each check is bounded in steps (keyword evaluations: about 4 us each): a schema whose `$ref`s
  expand exponentially, or an instance of millions of items, is left unchecked past MOST_STEPS.
"""

from __future__ import annotations

import itertools
from typing import Any

MOST_STEPS = 10_000  # keyword evaluations a check may take: some 40 ms
MOST_ERRORS_RANKED = 64  # a mismatch's errors looked at to name the one that says most
_UNCHECKED = frozenset({"pattern", "patternProperties", "uniqueItems"})


class _OverBudget(Exception):
    """A check took more than its steps."""


class SchemaCheck:
    """One schema's bounded validator (`of`), for `mismatch`."""

    __slots__ = ("_steps", "_validator")

    def __init__(self, validator: Any, steps: list[int]) -> None:
        self._validator = validator
        self._steps = steps  # the steps left to the check under way, counted by every keyword

    @classmethod
    def of(cls, schema: Any) -> SchemaCheck | None:
        """A check of `schema` in the draft it names (many servers still write draft-07; else
        2020-12); None if `schema` is not a schema."""
        from jsonschema import Draft202012Validator
        from jsonschema.validators import extend, validator_for
        from referencing import Registry

        try:
            kind = validator_for(schema, default=Draft202012Validator)
            kind.check_schema(schema)
        except Exception:  # SchemaError, or what the server's schema makes the meta-check raise
            return None
        steps = [MOST_STEPS]
        keywords: dict[str, Any] = {}
        for keyword, check in kind.VALIDATORS.items():
            if keyword in _UNCHECKED:
                continue
            if keyword in ("additionalProperties", "unevaluatedProperties"):
                check = _unless_patterns(check)
            keywords[keyword] = _counted(check, steps)
        bounded = extend(kind, {**{keyword: _skipped for keyword in _UNCHECKED}, **keywords})  # type: ignore[no-untyped-call]
        return cls(bounded(schema, registry=Registry()), steps)

    def mismatch(self, instance: Any) -> str:
        """Why `instance` does not match ("" if it does, or if telling would take more than MOST_STEPS)."""
        try:
            self._steps[0] = MOST_STEPS
            if self._validator.is_valid(instance):  # the common case, without gathering errors to rank
                return ""
            from jsonschema.exceptions import best_match

            self._steps[0] = MOST_STEPS
            error = best_match(itertools.islice(self._validator.iter_errors(instance), MOST_ERRORS_RANKED))
        except _OverBudget:
            return ""
        except RecursionError:
            return "nested too deep to be checked"
        except Exception as exc:
            return f"they could not be checked against it ({type(exc).__name__})"
        if error is None:
            return ""
        where = "/".join(str(part) for part in error.absolute_path)
        return f"{'argument ' + repr(where) + ': ' if where else ''}{error.message[:300]}"


def _counted(check: Any, steps: list[int]) -> Any:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        steps[0] -= 1
        if steps[0] < 0:
            raise _OverBudget
        return check(validator, value, instance, schema)

    return counted


def _skipped(*_: Any) -> None:
    return None


def _unless_patterns(check: Any) -> Any:
    def checked(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if isinstance(schema, dict) and "patternProperties" in schema:
            return None
        return check(validator, value, instance, schema)

    return checked
