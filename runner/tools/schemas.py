"""A downstream server's JSON schemas, checked within bounds: its tools' input schemas against a run's
arguments (the broker), its output schemas against its own results (the connection). Both happen on
the event loop every run shares, and the server wrote the schemas, a run the arguments: nothing here
may take long, whatever either holds.

- Keywords whose cost the instance chooses are not checked: `pattern` and `patternProperties` (a
  pattern may backtrack), `uniqueItems` (quadratic over unhashable items), `unevaluatedItems` and
  `unevaluatedProperties` (each item looked up in a list, each property through every branch); nor
  `additionalProperties` where the schema has `patternProperties` (telling which names are
  additional runs its patterns).
- No `$ref` is followed off the page: no registry to fetch a URL or read a file from; the schema's
  anchors are found once.
- Each check is one walk of the instance, bounded in steps (an error counts ERROR_STEPS): a step is
  a keyword evaluated (4-10 us), a part of the instance walked into, or VALUE_STEP entries of a
  keyword's value. A schema whose `$ref`s expand exponentially, or an instance of millions of items,
  is left unchecked past MOST_STEPS; an instance of more than MOST_NODES values, or a schema of more
  than MOST_SCHEMA_NODES, is not checked at all. Every part is checked by a bounded validator,
  whatever draft it names (`_Bounded`), and so is the schema against its meta-schema (META_STEPS, no
  format asserted).
- A step costs little whatever the instance holds: the validator sees a copy of it whose strings,
  objects and arrays print short, since jsonschema writes each error's message with the value it is
  about (a 300 KB string, once per branch of an `anyOf` of 9,000: 6.6 GB).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from runner.errors import is_exit

MOST_STEPS = 5_000  # steps a check may take: 50 ms at most (10 us each with $refs)
META_STEPS = 20_000  # a schema checked against its meta-schema, once a listed schema: some 0.15 s at most
MOST_NODES = 100_000  # an instance's values copied for a check at most
MOST_SCHEMA_NODES = 10_000  # a schema's values: a larger one is left to its server (a keyword's value is read whole)
VALUE_STEP = 8  # a keyword's value costs a step for each so many of its entries (an `enum`, `properties`)
ERROR_STEPS = 10  # what an error a keyword yields counts for (its object, its message, its context)
MOST_ERRORS_RANKED = 64  # a mismatch's errors looked at to name the one that says most
# Keywords whose cost the instance chooses: a pattern may backtrack; the others compare every pair
# of items, or walk the schema's every branch for each property, counting no step.
_UNCHECKED = frozenset({"pattern", "patternProperties", "uniqueItems", "unevaluatedItems", "unevaluatedProperties"})


class _OverBudget(Exception):
    """A check took more than its steps."""


class SchemaCheck:
    """One schema's bounded validator (`of`), for `mismatch`."""

    __slots__ = ("_plain", "_steps", "_validator")

    def __init__(self, validator: Any, steps: list[int], plain: Callable[[Any], bool] | None = None) -> None:
        self._validator = validator
        self._steps = steps  # the steps left to the check under way, counted by every keyword
        self._plain = plain  # `_plain_check` of the schema, where it is plain

    @classmethod
    def of(cls, schema: Any) -> SchemaCheck | None:
        """A check of `schema` in the draft it names (many servers still write draft-07; else
        2020-12); None if `schema` is not a schema. Every part of an instance is checked by a bounded
        validator, also where a `$ref` leads to a part (or to a draft's own meta-schema) that names
        its draft: `_Bounded`."""
        from jsonschema import Draft202012Validator
        from jsonschema.validators import validator_for
        from jsonschema_specifications import REGISTRY as DRAFTS  # type: ignore[import-untyped]
        from referencing import Registry, Specification
        from referencing.jsonschema import specification_with

        if _too_large(schema):
            return None
        try:
            kind = validator_for(schema, default=Draft202012Validator)
            if not _Bounded([META_STEPS]).is_schema(kind, schema):
                return None
            # Its anchors found once, not each time a `$ref` names one (referencing crawls the whole
            # schema for an anchor it has not seen); and no registry to fetch a `$ref`'s URL or read its
            # file from: the drafts' own meta-schemas only.
            meta_id = kind.META_SCHEMA.get("$id") or kind.META_SCHEMA.get("id") or ""
            draft = specification_with(meta_id, default=Specification.OPAQUE)
            resource = draft.create_resource(schema)
            uri = resource.id() or ""
            registry = DRAFTS.combine(Registry()).with_resource(uri, resource).crawl()
            steps = [MOST_STEPS]
            validator = _Bounded(steps).of(kind)(schema, _resolver=registry.resolver(base_uri=uri))
        except BaseException as exc:  # what the server's schema makes the meta-check or the crawl raise
            if is_exit(exc):
                raise
            return None
        return cls(validator, steps, _plain_check(schema))

    def mismatch(self, instance: Any) -> str:
        """Why `instance` does not match ("" if it does, or if telling would take more than MOST_STEPS).
        One walk tells both: the errors it meets, the first MOST_ERRORS_RANKED of them, are ranked to
        say why (a verdict, then a walk again for the errors, cost a hostile instance twice)."""
        from jsonschema.exceptions import best_match

        errors: list[Any] = []
        try:
            # Most tools' schemas are plain: a match is told in a few microseconds, not the validator's
            # 10-25 (on the event loop, a brokered call's round trip). What it does not pass, it checks.
            if self._plain is not None and self._plain(instance):
                return ""
            shadow = _shadow(instance, [MOST_NODES])
            self._steps[0] = MOST_STEPS
            errors.extend(itertools.islice(self._validator.iter_errors(shadow), MOST_ERRORS_RANKED))
        except _OverBudget:
            pass  # what was met within the steps says why; if nothing was, it is left to the server
        except RecursionError:
            return "nested too deep to be checked"
        except BaseException as exc:  # a Rust extension's panic too (`is_exit`): nothing here awaits
            if is_exit(exc):
                raise
            return f"they could not be checked against it ({type(exc).__name__})"
        error = best_match(errors)
        if error is None:
            return ""
        where = "/".join(str(part) for part in error.absolute_path)
        return f"{'argument ' + repr(where) + ': ' if where else ''}{error.message[:300]}"


class _Bounded:
    """The bounded validator classes of one check, one for each draft it meets, sharing its steps.

    jsonschema checks a part of the instance whose schema names a draft (its own `$schema`, the root's
    reached by a `$ref` to it, a `$ref` to a draft's meta-schema) with that draft's registered
    validator (`evolve`): without these bounds, a `pattern` there backtracked on the event loop (found
    by a review: 0.3 s at 22 characters, x4 each two more). Here each class's `evolve` makes the bounded
    class of the draft jsonschema picks."""

    def __init__(self, steps: list[int]) -> None:
        self._steps = steps
        self._classes: dict[Any, Any] = {}  # bounded class, by the registered one it bounds
        self._registered: dict[Any, Any] = {}  # the registered class, by its bounded one

    def of(self, kind: Any) -> Any:
        """The bounded class of the registered validator class `kind`."""
        from jsonschema.validators import extend

        made = self._classes.get(kind)
        if made is None:
            keywords: dict[str, Any] = {}
            for keyword, check in kind.VALIDATORS.items():
                if keyword in _UNCHECKED:
                    continue
                if keyword == "additionalProperties":
                    check = _unless_patterns(check)
                keywords[keyword] = _counted(check, self._steps)
            made = extend(kind, {**{keyword: _skipped for keyword in _UNCHECKED}, **keywords})  # type: ignore[no-untyped-call]
            made.evolve = self._evolve()
            made.descend = self._descend(made.descend)
            self._classes[kind], self._registered[made] = made, kind
        return made

    def _descend(self, descend: Callable[..., Any]) -> Callable[..., Any]:
        """jsonschema's `descend` (into a part of the instance), a step each: an `items` over a long
        array, even of `true`, walks each item."""
        steps = self._steps

        def counted(validator: Any, *args: Any, **kwargs: Any) -> Any:
            _spend(steps)
            return descend(validator, *args, **kwargs)

        return counted

    def _evolve(self) -> Callable[..., Any]:
        """jsonschema's `evolve` (the validator of a part of the instance), its class a bounded one."""
        from jsonschema.validators import validator_for

        def evolve(validator: Any, **changes: Any) -> Any:
            schema = changes.setdefault("schema", validator.schema)
            kind = validator_for(schema, default=self._registered[type(validator)])
            for field in type(validator).__attrs_attrs__:  # what jsonschema's own evolve carries over
                if field.init and field.alias not in changes:
                    changes[field.alias] = getattr(validator, field.name)
            return self.of(kind)(**changes)

        return evolve

    def is_schema(self, kind: Any, schema: Any) -> bool:
        """Whether `schema` is a schema of `kind`'s draft, by its meta-schema (what `check_schema`
        tells), within META_STEPS; one too large to tell within them is taken as one (a fault it
        hides fails that call's check, not the loop)."""
        from jsonschema.validators import validator_for
        from referencing import Registry

        # No format asserted: the `regex` one compiles every pattern (a hostile one, seconds), and no
        # pattern is run here.
        meta = kind.META_SCHEMA
        checking = self.of(validator_for(meta, default=kind))(meta, registry=Registry())
        try:
            return next(iter(checking.iter_errors(schema)), None) is None
        except _OverBudget:
            return True


class _Text(str):
    def __repr__(self) -> str:
        return repr(str(self[:40])) + ("..." if len(self) > 40 else "")


class _Object(dict[Any, Any]):
    def __repr__(self) -> str:
        return "{...}" if self else "{}"


class _Array(list[Any]):
    def __repr__(self) -> str:
        return "[...]" if self else "[]"


def _shadow(value: Any, left: list[int]) -> Any:
    """`value` as the validator sees it (short to print), from at most `left[0]` values."""
    left[0] -= 1
    if left[0] < 0:
        raise _OverBudget
    if isinstance(value, str):
        return _Text(value)
    if isinstance(value, dict):
        return _Object({_Text(key): _shadow(item, left) for key, item in value.items()})
    if isinstance(value, list):
        return _Array([_shadow(item, left) for item in value])
    return value


def _counted(check: Any, steps: list[int]) -> Any:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _spend(steps, 1 + (len(value) // VALUE_STEP if isinstance(value, (list, dict)) else 0))
        errors = check(validator, value, instance, schema)
        return None if errors is None else _counting(errors, steps)

    return counted


def _counting(errors: Any, steps: list[int]) -> Any:
    """`errors` as a keyword yields them, each ERROR_STEPS steps: making one costs more than a step."""
    for error in errors:
        _spend(steps, ERROR_STEPS)
        yield error


# A plain schema's keywords: each checked here at least as strictly as jsonschema does in any draft
# (an integer is an int, never a float; an enum only of strings), so that what passes here passes
# there. What fails here is checked there, which says why. The rest are annotations.
_PLAIN_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}
_ANNOTATIONS = ("description", "title", "default", "examples", "$comment", "format", "deprecated")
_PLAIN = frozenset(
    {*_ANNOTATIONS, "readOnly", "writeOnly", "type", "properties", "required", "additionalProperties", "items", "enum"}
)

# A check of one value against one plain schema: True if it matches; `left` counts the values seen.
Plain = Callable[[Any, list[int]], bool]


def _plain_check(schema: Any) -> Callable[[Any], bool] | None:
    """A check that an instance matches `schema` (True), made where `schema` holds only plain keywords
    (`_PLAIN`); None where it holds any other, or is too deep for one. Past MOST_NODES values,
    `_OverBudget`."""
    try:
        # A draft named at its root only (`of`), and the plain keywords are checked for the strictest draft.
        root = {key: value for key, value in schema.items() if key != "$schema"} if isinstance(schema, dict) else schema
        check = _plain(root)
    except RecursionError:
        return None
    if check is None:
        return None
    return lambda instance: check(instance, [MOST_NODES])


def _plain(schema: Any) -> Plain | None:
    if schema is True or schema == {}:
        return _any
    if not isinstance(schema, dict) or not _PLAIN.issuperset(schema):
        return None
    checks: list[Plain] = []
    if "type" in schema:
        kinds = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
        if not isinstance(kinds, list) or not all(isinstance(k, str) and k in _PLAIN_TYPES for k in kinds):
            return None
        types = tuple(t for k in kinds for t in _PLAIN_TYPES[k])
        bools = "boolean" in kinds  # else a bool is no number (Python's bool is an int)
        checks.append(lambda value, _: isinstance(value, types) and (bools or not isinstance(value, bool)))
    if "enum" in schema:
        enum = schema["enum"]
        if not isinstance(enum, list) or not all(isinstance(item, str) for item in enum):
            return None
        strings = frozenset(enum)
        checks.append(lambda value, _: isinstance(value, str) and value in strings)
    properties, required = schema.get("properties", {}), schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    if not all(isinstance(name, str) for name in required):
        return None
    required = list(dict.fromkeys(required))  # each once: an object that passes holds them all
    named = {name: _plain(sub) for name, sub in properties.items()}
    extra = schema.get("additionalProperties", True)
    other = None if extra is False else _plain(extra)
    if None in named.values() or (other is None and extra is not False):
        return None
    if named or required or extra is not True:
        checks.append(_object_check(named, required, other))  # type: ignore[arg-type]
    if "items" in schema:
        each = _plain(schema["items"])
        if each is None:
            return None
        checks.append(lambda value, left: not isinstance(value, list) or all(each(item, left) for item in value))
    return lambda value, left: _counted_value(left) and all(check(value, left) for check in checks)


def _object_check(named: dict[str, Plain], required: list[Any], other: Plain | None) -> Plain:
    def check(value: Any, left: list[int]) -> bool:
        if not isinstance(value, dict):
            return True
        if any(name not in value for name in required):
            return False
        for key, item in value.items():
            one = named.get(key, other)
            if one is None or not one(item, left):
                return False
        return True

    return check


def _any(_: Any, left: list[int]) -> bool:
    return _counted_value(left)


def _counted_value(left: list[int]) -> bool:
    _spend(left)
    return True


def _spend(left: list[int], steps: int = 1) -> None:
    """Take `steps` from what a check has `left`; past it, `_OverBudget`."""
    left[0] -= steps
    if left[0] < 0:
        raise _OverBudget


def _too_large(schema: Any) -> bool:
    """Whether `schema` holds more than MOST_SCHEMA_NODES values (a listing holds 4 MiB at most)."""
    left, stack = MOST_SCHEMA_NODES, [schema]
    while stack:
        left -= 1
        if left < 0:
            return True
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _skipped(*_: Any) -> None:
    return None


def _unless_patterns(check: Any) -> Any:
    def checked(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if isinstance(schema, dict) and "patternProperties" in schema:
            return None
        return check(validator, value, instance, schema)

    return checked
