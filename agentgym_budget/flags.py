"""Command-line flags generated from a settings dataclass (as CleanRL's ``tyro`` does): one ``--flag`` per field.

:class:`~agentgym_budget.train.config.TrainConfig` and :class:`~agentgym_budget.eval.config.EvalConfig`
are such dataclasses: the docstring under a field is its help, its default the flag's default,
its type the flag's parser.  A field's metadata (made with :func:`flag`) overrides any of that:
other option names, an argparse ``type``/``action``/``choices``, a command-line default, a
``convert`` from the parsed value to the field's; :func:`no_flag` keeps a field off the command
line.  The dataclass checks its values itself (``__post_init__``): the parsers here only turn
text into values, so a value is checked in one place whether it came from Python or a flag.

Example:
    >>> import argparse, dataclasses
    >>> @dataclasses.dataclass
    ... class Settings:
    ...     tasks: int = 50
    ...     '''tasks to run'''
    ...     names: dict = dataclasses.field(default_factory=dict, metadata=flag(
    ...         "--name", action="append", type=key_value, default=[], metavar="KEY=VALUE", convert=dict))
    ...     '''KEY=VALUE, repeatable'''
    ...     seed: int = dataclasses.field(default=0, metadata=no_flag())
    >>> parser = add_arguments(argparse.ArgumentParser(), Settings)
    >>> from_arguments(Settings, parser.parse_args(["--tasks", "3", "--name", "p=0.5"]))
    Settings(tasks=3, names={'p': 0.5}, seed=0)
    >>> usage = parser.format_usage()
    >>> "[--tasks TASKS]" in usage, "[--name KEY=VALUE]" in usage, "--seed" in usage
    (True, True, False)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import sys
import textwrap
from collections.abc import Callable, Collection, Sequence
from typing import Any, get_type_hints

__all__ = ["add_arguments", "field_docs", "flag", "flag_table", "from_arguments", "int_list", "key_value", "no_flag",
           "parse_int", "shown"]

_FLAG = "flag"  # the metadata key of a field's flag overrides
_MAX_DIGITS = 19  # an int argument longer than this is no count or seed anyone means


def flag(*names: str, convert: Callable[[Any], Any] | None = None, **argparse_kwargs: Any) -> dict[str, Any]:
    """Field metadata: the flag's option ``names`` (default ``--field-name``; the field's own name alone
    for a positional argument), ``argparse_kwargs`` for ``add_argument`` and ``convert``, applied to
    the parsed value to give the field's."""
    return {_FLAG: {"names": names, "convert": convert, "kwargs": argparse_kwargs}}


def no_flag() -> dict[str, Any]:
    """Field metadata: no command-line flag (a setting only Python callers give)."""
    return {_FLAG: None}


def add_arguments(parser: argparse.ArgumentParser, cls: type, *, show_default: bool = True,
                  only: Collection[str] | None = None, config_file: bool = False) -> argparse.ArgumentParser:
    """One flag per field of the dataclass ``cls`` (``env_id`` → ``--env-id``), help from its docs
    (followed by ``(default: X)`` with ``show_default``); ``only``: the flags of these fields alone
    (a command that shares some of another's settings).  ``config_file``: also ``--config FILE``,
    the fields' values from a TOML (or YAML) file, any flag given overriding it (parse with
    :func:`parse_with_config`).

    Example:
        >>> import dataclasses
        >>> @dataclasses.dataclass
        ... class Settings:
        ...     tasks: int = 50
        ...     seed: int = 0
        >>> parser = add_arguments(argparse.ArgumentParser(), Settings, only=["seed"])
        >>> "--seed" in parser.format_usage(), "--tasks" in parser.format_usage()
        (True, False)
        >>> from_arguments(Settings, parser.parse_args(["--seed", "3"]), only=["seed"])
        Settings(tasks=50, seed=3)
        >>> add_arguments(argparse.ArgumentParser(), Settings, only=["sed"])
        Traceback (most recent call last):
        ...
        ValueError: Settings has no flag for ['sed']; its flags are for: tasks, seed
    """
    hints, docs = get_type_hints(cls), field_docs(cls)
    for f in _flagged_fields(cls, only):
        spec = f.metadata.get(_FLAG) or {}
        names = spec.get("names") or ("--" + f.name.replace("_", "-"),)
        overrides = dict(spec.get("kwargs", {}))
        default = overrides.pop("default", _default_of(f))
        help_text = docs.get(f.name, "") + (f" (default: {default!r})" if show_default else "")
        if "action" in overrides or "choices" in overrides:
            kwargs = overrides
        elif hints[f.name] is bool and "type" not in overrides:
            kwargs = {"action": argparse.BooleanOptionalAction, **overrides}
        else:  # the value's name in the help: the flag's (--k K), as argparse would name it
            kwargs = {"type": _parser_for(hints[f.name]), "metavar": names[0].lstrip("-").replace("-", "_").upper(),
                      **overrides}
        if names[0].startswith("-"):
            parser.add_argument(*names, dest=f.name, default=default, help=help_text.strip(), **kwargs)
        else:  # a positional argument: its one name is the field's
            if names != (f.name,):
                raise ValueError(f"{cls.__name__}.{f.name}: a positional flag is named after its field, got {names}")
            parser.add_argument(f.name, default=default, help=help_text.strip(), **kwargs)
    if config_file:
        parser.add_argument("--config", metavar="FILE", default=None,
                            help="read the settings from this TOML (.toml) or YAML (.yaml) file, keys the flags' "
                                 "field names (env_id = ...); a flag given as well overrides the file's value")
        parser.set_defaults(_config_class=cls, _config_parser=parser, _config_only=only)
    return parser


def parse_with_config(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``parser.parse_args(argv)``, with a ``--config FILE`` (:func:`add_arguments` ``config_file``) read
    first: the file's values become the defaults, so every flag on the command line overrides them.

    Example:
        >>> import dataclasses, pathlib, tempfile
        >>> @dataclasses.dataclass
        ... class Settings:
        ...     tasks: int = 50
        ...     seed: int = 0
        >>> parser = add_arguments(argparse.ArgumentParser(), Settings, config_file=True)
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.toml"
        >>> _ = path.write_text("tasks = 7\\nseed = 3\\n")
        >>> from_arguments(Settings, parse_with_config(parser, ["--config", str(path), "--seed", "1"]))
        Settings(tasks=7, seed=1)
    """
    args = parser.parse_args(argv)
    path = getattr(args, "config", None)
    if path is None or not hasattr(args, "_config_parser"):
        return args
    sub: argparse.ArgumentParser = args._config_parser
    try:
        values = read_config_file(path, args._config_class, args._config_only)
    except ValueError as error:
        sub.error(str(error))
    sub.set_defaults(**values)
    return parser.parse_args(argv)


def read_config_file(path: str, cls: type, only: Collection[str] | None = None) -> dict[str, Any]:
    """The field values in the TOML or YAML file ``path``, each key a flagged field of ``cls`` (lists of
    tuple fields as tuples); a one-line ``ValueError`` for an unreadable file or an unknown key."""
    text = _read_text(path)
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise ValueError(f"--config {path}: reading YAML needs PyYAML (pip install pyyaml); "
                             f"or write the file as TOML") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"--config {path}: not valid YAML: {' '.join(str(error).split())}") from None
    else:
        data = _toml_loads(text, path)
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a table of settings (key = value), got {type(data).__name__}")
    fields = {f.name: f for f in _flagged_fields(cls, only)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"--config {path}: unknown key {unknown[0]!r}; the keys are the flags' field names: "
                         f"{', '.join(fields)}")
    hints = get_type_hints(cls)
    return {key: tuple(value) if isinstance(value, list) and "tuple" in str(hints[key]) else value
            for key, value in data.items()}


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except OSError as error:
        raise ValueError(f"--config {path}: cannot read it ({error.strerror})") from None


def _toml_loads(text: str, path: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the same parser, before it joined the standard library
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"--config {path}: not valid TOML: {error}") from None


def from_arguments(cls: type, args: argparse.Namespace, only: Collection[str] | None = None) -> Any:
    """The ``cls`` of parsed :func:`add_arguments` flags (fields without a flag, or not in ``only``,
    keep their defaults)."""
    values = {}
    for f in _flagged_fields(cls, only):
        convert = (f.metadata.get(_FLAG) or {}).get("convert")
        value = getattr(args, f.name)
        values[f.name] = convert(value) if convert is not None else value
    return cls(**values)


def flag_table(cls: type) -> str:
    """The Markdown table of every ``--flag`` of ``cls``, its default and its meaning."""
    docs = field_docs(cls)
    rows = ["| flag | default | meaning |", "|---|---|---|"]
    for f in _flagged_fields(cls):
        meaning = docs.get(f.name, "").replace("``", "`")
        rows.append(f"| `--{f.name.replace('_', '-')}` | `{_default_of(f)!r}` | {meaning} |")
    return "\n".join(rows)


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of ``cls`` (read from the source, as CleanRL's tyro does).

    The source is parsed once per class (every ``--help`` and flag table asks again); each call
    gets its own copy, so a caller may change it.

    Example:
        >>> from agentgym_budget.eval.config import EvalConfig
        >>> field_docs(EvalConfig)["seed"], field_docs(EvalConfig) is field_docs(EvalConfig)
        ('base seed (default 0)', False)
    """
    return dict(_parsed_field_docs(cls))


@functools.cache
def _parsed_field_docs(cls: type) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    statement = tree.body[0]
    if not isinstance(statement, ast.ClassDef):  # the source of a class is its class statement
        return {}
    body, docs = statement.body, {}
    for node, following in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant) and isinstance(following.value.value, str)):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def _flagged_fields(cls: type, only: Collection[str] | None = None) -> list[dataclasses.Field]:
    flagged = [f for f in dataclasses.fields(cls) if not (_FLAG in f.metadata and f.metadata[_FLAG] is None)]
    if only is None:
        return flagged
    unknown = sorted(set(only) - {f.name for f in flagged})
    if unknown:
        raise ValueError(f"{cls.__name__} has no flag for {unknown}; its flags are for: "
                         f"{', '.join(f.name for f in flagged)}")
    return [f for f in flagged if f.name in only]


def _default_of(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _parser_for(kind: Any) -> Callable[[str], Any]:
    text = str(kind)
    if kind is int or kind is float:
        return kind
    if "tuple" in text:
        return lambda value: tuple(int(v) for v in value.split(",") if v.strip())
    if "dict" in text:
        return json.loads
    if "None" in text:  # str | None, int | None
        inner = int if "int" in text else float if "float" in text else str
        return lambda value: None if value.lower() in ("none", "null", "") else inner(value)
    return str


# -- strict parsers of command-line text (they parse; the dataclass checks the values) ----------


def shown(text: str) -> str:
    """``text`` quoted for an error message, shortened when long.

    Example:
        >>> shown("9" * 5000)
        "'9999999999999999999999999999999999999999'... (5000 characters)"
    """
    return repr(text) if len(text) <= 60 else repr(text[:40]) + f"... ({len(text)} characters)"


def _int_of(text: str) -> int:
    digits = text.strip().lstrip("+-")
    if not (digits.isascii() and digits.isdigit()) or len(digits) > _MAX_DIGITS:
        raise ValueError(text)
    return int(text)


def parse_int(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: ASCII decimal digits as an int; a message naming the values ``low..high``
    accepted (the dataclass refuses a value outside them).

    Example:
        >>> parse_int(1, 1000)("12")
        12
        >>> parse_int(1, 1000)("1e3")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: expected an integer in 1..1,000, got '1e3'
    """
    accepted = f"an integer >= {low}" if high is None else f"an integer in {low}..{high:,}"

    def parse(text: str) -> int:
        try:
            return _int_of(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {accepted}, got {shown(text)}") from None

    parse.__name__ = accepted  # argparse names the type in its own messages
    return parse


def int_list(text: str) -> list[int]:
    """An argparse type: comma-separated integers (``1,2,4,8``).

    Example:
        >>> int_list("1, 2,4")
        [1, 2, 4]
    """
    try:
        values = [_int_of(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers >= 1 such as 1,2,4,8; got {shown(text)}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer >= 1, got {shown(text)}")
    return values


def key_value(text: str) -> tuple[str, Any]:
    """An argparse type: ``KEY=VALUE``, the value read as JSON where it is JSON (numbers, true, lists).

    Example:
        >>> key_value("p=0.5"), key_value("model=path/to/model")
        (('p', 0.5), ('model', 'path/to/model'))
    """
    key, sep, raw = text.partition("=")
    if not sep or not key.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY a Python name (e.g. p=0.5), got {shown(text)}")
    try:
        value = json.loads(raw)  # numbers, true/false, null, lists
    except (json.JSONDecodeError, RecursionError):
        value = raw
    return key.strip(), value
