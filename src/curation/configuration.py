"""The one way a config mapping becomes a typed object: :func:`parse_dataclass`.

Every config group of the project is a plain ``@dataclass`` (its schema). A
mapping -- a dict, an OmegaConf ``DictConfig``, a YAML file loaded as either --
becomes an instance of it through :func:`parse_dataclass`, which

- refuses unknown keys, naming them (``selection.lamda: unknown key; known: [...]``);
- refuses values of the wrong type, the same way for every group: a ``bool`` is
  not an ``int``, ``3.0`` is not an ``int`` (OmegaConf refuses it too), an
  ``int`` is a ``float``;
- recurses into nested dataclasses, lists and dicts, extending the key path;
- fills missing keys with the dataclass defaults (for a nested dataclass: the
  defaults of the field's default value's class, so ``fasttext_ultrafineweb``
  keeps Ultra-FineWeb's defaults);
- builds the instance, so the class's ``__post_init__`` range checks run, and
  prefixes the key path to their :class:`ConfigError` (``data.max_docs=-3:
  must be >= 1 or null``).

Range checks live in the dataclasses (``__post_init__``), written with the
helpers below, so a Python caller building a config by hand gets the same
errors as ``curate`` does at composition time.

No Hydra, OmegaConf, Kedro or MLflow import here: this is core code (a ``DictConfig`` is a
``Mapping`` and a ``ListConfig`` a ``Sequence``: read as such, their values come resolved).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Iterable, Mapping

from curation.errors import UserError

# Marks runtime params that already are a composed config (set by `curate`, read by the config loader and the
# MLflow hook): here, on the floor both stand on, so that tracking need not import the Kedro glue.
COMPOSED_KEY = "__curation_composed__"

_MISSING = object()


def format_value(value: Any) -> str:
    """A value as the user would type it in an override (null, true, 0.5, 'text')."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)


class ConfigError(UserError, ValueError, KeyError):
    """A config value is unknown, of the wrong type or out of range.

    ``key`` is the dotted path of the offending key, relative to where the
    error was raised; :meth:`under` prefixes the path of the enclosing group.
    A ``KeyError`` too, so callers that caught the unknown-key ``KeyError`` of
    earlier parsers keep working.
    """

    def __init__(self, key: str, message: str, value: Any = _MISSING) -> None:
        self.key = key
        self.message = message
        self.value = value
        super().__init__(str(self))

    def __str__(self) -> str:
        head = self.key if self.value is _MISSING else f"{self.key}={format_value(self.value)}"
        return f"{head}: {self.message}" if head else self.message

    def under(self, path: str) -> "ConfigError":
        """The same error with ``path`` in front of its key."""
        if not path:
            return self
        return ConfigError(f"{path}.{self.key}" if self.key else path, self.message, self.value)


# --- range checks for __post_init__ -------------------------------------------------------------


def check(ok: bool, key: str, value: Any, allowed: str) -> None:
    """Raise ``ConfigError(key=value: must be <allowed>)`` unless ``ok``."""
    if not ok:
        raise ConfigError(key, f"must be {allowed}", value)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def at_least(key: str, value: Any, low: float, *, optional: bool = False, strict: bool = False) -> None:
    """``value >= low`` (``> low`` with ``strict``); ``None`` allowed with ``optional``."""
    if optional and value is None:
        return
    ok = _number(value) and (value > low if strict else value >= low)
    allowed = f"{'>' if strict else '>='} {low:g}" + (" or null" if optional else "")
    check(ok, key, value, allowed)


def in_range(key: str, value: Any, low: float, high: float, *, low_open: bool = False, high_open: bool = False,
             optional: bool = False) -> None:
    """``value`` in the interval ``[low, high]`` (``(``/``)`` with the open flags); ``None`` with ``optional``."""
    if optional and value is None:
        return
    ok = _number(value) and (value > low if low_open else value >= low)
    ok = ok and (value < high if high_open else value <= high)
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    check(ok, key, value, f"in {interval}" + (" or null" if optional else ""))


def one_of(key: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    check(value in choices, key, value, "one of " + ", ".join(format_value(c) for c in choices))


def each(key: str, values: Iterable[Any], test: typing.Callable[[str, Any], None]) -> None:
    """Run ``test(f"{key}[i]", v)`` on every item of a list knob."""
    for i, value in enumerate(values or ()):
        test(f"{key}[{i}]", value)


# --- parsing ------------------------------------------------------------------------------------


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _is_list(value: Any) -> bool:
    """A list knob's value: any sequence but a string (a ``ListConfig`` is one: the core takes an OmegaConf
    container as the plain mapping/sequence it is, reading resolved values, and never imports OmegaConf)."""
    return isinstance(value, typing.Sequence) and not isinstance(value, (str, bytes))


def _type_error(path: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(path, f"expected {expected}, got {type(value).__name__}", value)


def _coerce(path: str, value: Any, annotation: Any, default: Any = _MISSING) -> Any:
    if annotation is Any or annotation is object:
        return value
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            if type(None) in args:
                return None
            raise _type_error(path, value, "a value (null is not allowed)")
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _coerce(path, value, options[0], default)
        errors = []
        for option in options:
            try:
                return _coerce(path, value, option, default)
            except ConfigError as err:
                errors.append(err)
        raise errors[0]
    if value is None:
        raise _type_error(path, value, "a value (null is not allowed)")
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        # A field defaulting to a subclass instance (fasttext_ultrafineweb: UltraFineWebConfig) keeps its class.
        cls = type(default) if dataclasses.is_dataclass(default) and isinstance(default, annotation) else annotation
        return parse_dataclass(cls, value, path=path)
    if origin in (list, tuple, typing.Sequence) or annotation in (list, tuple):
        if not _is_list(value):
            raise _type_error(path, value, "a list")
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(f"{path}[{i}]", v, args[0]) for i, v in enumerate(value))
        item = args[0] if args else Any
        items = [_coerce(f"{path}[{i}]", v, item) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple or annotation is tuple else items
    if origin in (dict, typing.Mapping) or annotation is dict:
        if not isinstance(value, Mapping):
            raise _type_error(path, value, "a mapping")
        item = args[1] if len(args) == 2 else Any
        return {k: _coerce(_join(path, k), v, item) for k, v in value.items()}
    if annotation is bool:
        if not isinstance(value, bool):
            raise _type_error(path, value, "a bool (true/false)")
        return value
    if annotation is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise _type_error(path, value, "an int")
        return value
    if annotation is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _type_error(path, value, "a number")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise _type_error(path, value, "a string")
        return value
    if typing.get_origin(annotation) is typing.Literal:
        one_of(path, value, args)
        return value
    raise TypeError(f"{path}: unsupported annotation {annotation!r}")  # a programming error in a schema


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return _MISSING


def parse_dataclass(cls: type, mapping: Any, path: str = "", *, prefix: str | None = None) -> Any:
    """Build ``cls`` from ``mapping`` (dict, ``DictConfig``, or an instance of ``cls``), strictly.

    ``path`` is the dotted key of ``mapping`` in the whole config (``"pretrain"``),
    put in front of every error's key. ``prefix="pretrain."`` is the older
    spelling of the same thing.
    """
    if prefix is not None:
        path = prefix.rstrip(".")
    if dataclasses.is_dataclass(mapping) and not isinstance(mapping, type):
        mapping = {f.name: getattr(mapping, f.name) for f in dataclasses.fields(mapping)}
    if not isinstance(mapping, Mapping):
        raise _type_error(path or cls.__name__, mapping, f"a mapping of {cls.__name__} keys")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(str(k) for k in mapping if k not in fields)
    if unknown:
        raise ConfigError(_join(path, unknown[0]), f"unknown key; known: {sorted(fields)}")
    kwargs = {}
    for key, value in mapping.items():
        default = _MISSING
        if dataclasses.is_dataclass(hints[key]) or typing.get_origin(hints[key]) in (typing.Union, types.UnionType):
            default = _field_default(fields[key])
        kwargs[key] = _coerce(_join(path, key), value, hints[key], default)
    try:
        return cls(**kwargs)
    except ConfigError as err:
        raise err.under(path) from None
    except (ValueError, ArithmeticError) as err:  # a check written without ConfigError: still name the group
        if not path:
            raise
        raise ConfigError(path, str(err)) from err


__all__ = ["ConfigError", "at_least", "check", "each", "format_value", "in_range", "one_of", "parse_dataclass"]
