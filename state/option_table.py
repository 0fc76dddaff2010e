"""Declarative option tables: each component's options, declared once.

A component (the ``gtkafka`` source, the ``barrier`` sink, the state store's ``s3.*``
options) lists its options as one :class:`OptionTable` of specs. A spec says the
option's name, its type (the spec's class: :class:`StringOption`, :class:`IntegerOption`,
:class:`BooleanOption`, :class:`DurationOption`, :class:`ChoiceOption`,
:class:`JsonOption`, :class:`PrefixOption`), default, bounds, a one-line doc and extras:
required, only with a value of another option (``consumer=kafka``), only together with
another option, or a prefix under which any name is passed on (``kafka.*``). From the
table come

* the unknown-option check (:meth:`OptionTable.check_known`, as kafka-python checks
  its ``DEFAULT_CONFIG``),
* the typed reading of each value (``SPEC.read(options)``, through the accessors of
  :class:`state.options.Options`, which word every error), and
* the Markdown option tables in README.md and docs/ (:func:`render_markdown`, written
  by ``python -m scripts.option_docs --write``).

Checks that involve several options in a component-specific way (a subscription, offset
JSON, consumer paths) stay in the component's ``parse``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, NamedTuple, Protocol, TypeVar

from state.errors import ConfigError
from state.options import Options, format_duration

L = TypeVar("L", bound=str)
# The type of a default: a value, or None for "unset unless given".
DI = TypeVar("DI", int, None)
DB = TypeVar("DB", bool, None)
DF = TypeVar("DF", float, None)

HEADERS = ("option", "default", "meaning")


class _NotShown:
    """The value of an option an error names without showing it."""

    def __repr__(self) -> str:
        return "<not shown>"


NOT_SHOWN = _NotShown()


class DocRow(NamedTuple):
    """One row of a Markdown option table: the name cell, the default cell, the doc."""

    name: str
    default: str
    meaning: str

    def doc_row(self) -> DocRow:
        return self


class Documented(Protocol):
    """Anything the renderer can show as one row (a spec, a :class:`DocRow`)."""

    def doc_row(self) -> DocRow: ...


@dataclass(frozen=True)
class OnlyWith:
    """Extra: the option applies only when ``option`` has one of ``values``."""

    option: str
    values: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.option}={'/'.join(self.values)}"


@dataclass(frozen=True, kw_only=True)
class OptionSpec:
    """What every option declares. Subclasses add the type, default and bounds.

    ``required`` means required whenever the option applies (see ``only_with``);
    ``requires`` names an option that must be set too; ``default_doc`` replaces the
    default cell of the docs when the value alone does not say it ("AWS chain").
    """

    name: str
    doc: str
    required: bool = False
    only_with: OnlyWith | None = None
    requires: str | None = None
    default_doc: str | None = None

    def name_cell(self) -> str:
        return f"`{self.name}`"

    def default_text(self) -> str:
        """The default as the docs show it, when there is no ``default_doc``."""
        return "none"

    def default_cell(self) -> str:
        if self.default_doc is not None:
            return self.default_doc
        if self.required and self.only_with is not None:
            return "required for " + "/".join(self.only_with.values)
        if self.required:
            return "required"
        return self.default_text()

    def doc_row(self) -> DocRow:
        return DocRow(self.name_cell(), self.default_cell(), self.doc)

    def is_set(self, opts: Options) -> bool:
        """Given with a non-blank value."""
        return opts.string(self.name) is not None


@dataclass(frozen=True, kw_only=True)
class StringOption(OptionSpec):
    """Text, stripped; a blank value counts as unset."""

    def read(self, opts: Options) -> str | None:
        return opts.string(self.name)

    def read_required(self, opts: Options) -> str:
        return opts.required(self.name)


@dataclass(frozen=True, kw_only=True)
class JsonOption(StringOption):
    """JSON text (or a keyword such as ``latest``); the component parses it."""


@dataclass(frozen=True, kw_only=True)
class IntegerOption(OptionSpec, Generic[DI]):
    """An integer within ``[minimum, maximum]``; ``read`` is ``int`` when the default is."""

    default: DI
    minimum: int | None = None
    maximum: int | None = None

    def read(self, opts: Options) -> int | DI:
        return opts.integer(self.name, self.default, minimum=self.minimum, maximum=self.maximum)

    def default_text(self) -> str:
        return "none" if self.default is None else f"`{self.default}`"


@dataclass(frozen=True, kw_only=True)
class BooleanOption(OptionSpec, Generic[DB]):
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``, ``on``/``off``)."""

    default: DB

    def read(self, opts: Options) -> bool | DB:
        return opts.boolean(self.name, self.default)

    def default_text(self) -> str:
        return "none" if self.default is None else f"`{str(self.default).lower()}`"


@dataclass(frozen=True, kw_only=True)
class DurationOption(OptionSpec, Generic[DF]):
    """Seconds, from ``500ms``, ``30s``, ``5m``, ``1h`` or a number of seconds."""

    default: DF
    positive: bool = False

    def read(self, opts: Options) -> float | DF:
        seconds = opts.duration(self.name, self.default)
        if self.positive and seconds is not None and seconds <= 0:
            raise opts.error(self.name, "a positive duration such as '500ms', '5s', '2m'")
        return seconds

    def default_text(self) -> str:
        return "none" if self.default is None else f"`{format_duration(self.default)}`"


@dataclass(frozen=True, kw_only=True)
class ChoiceOption(OptionSpec, Generic[L]):
    """One of ``choices``, case-insensitive; ``read`` returns the literal as declared."""

    choices: tuple[L, ...]
    default: L

    def read(self, opts: Options) -> L:
        return opts.choice(self.name, self.choices, self.default)

    def default_text(self) -> str:
        return f"`{self.default}`"


@dataclass(frozen=True, kw_only=True)
class PrefixOption(OptionSpec):
    """Every option under ``name`` (which ends with a dot), passed on to a client."""

    def name_cell(self) -> str:
        return f"`{self.name}*`"

    def default_text(self) -> str:
        return ""

    def read(self, opts: Options) -> dict[str, str]:
        """The options under the prefix, the prefix removed, names lower-cased."""
        return opts.with_prefix(self.name)

    def given(self, opts: Options) -> list[tuple[str, str]]:
        """``(name as spelled, value)`` of every option under the prefix."""
        prefix = self.name.lower()
        return [(n, v) for n, v in opts.items() if n.lower().startswith(prefix)]

    def is_set(self, opts: Options) -> bool:
        return bool(self.given(opts))


@dataclass(frozen=True)
class Shared:
    """Another table's options, accepted here too and documented there (one summary row)."""

    table: OptionTable
    doc: str
    default_doc: str

    def doc_row(self) -> DocRow:
        names = ", ".join(spec.name_cell() for spec in self.table.specs())
        return DocRow(names, self.default_doc, self.doc)


@dataclass(frozen=True)
class OptionTable:
    """One component's options, in the order the docs list them.

    ``component`` names the table (``gtkafka``, ``barrier``, ``state``): the docs mark
    its rendering with ``<!-- options:<component> -->``.
    """

    component: str
    entries: tuple[OptionSpec | Shared, ...]

    def specs(self) -> tuple[OptionSpec, ...]:
        """Every option spec, those of shared tables included."""
        found: list[OptionSpec] = []
        for entry in self.entries:
            found.extend(entry.table.specs() if isinstance(entry, Shared) else (entry,))
        return tuple(found)

    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs() if not isinstance(s, PrefixOption))

    def prefixes(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs() if isinstance(s, PrefixOption))

    def rows(self) -> list[DocRow]:
        return [entry.doc_row() for entry in self.entries]

    def check_known(self, opts: Options) -> None:
        """Raise :class:`~state.errors.UnknownOptionError` for any option not in the table."""
        opts.check_known(self.names(), self.prefixes())

    def check_requires(self, opts: Options) -> None:
        """An option given without the option it ``requires`` is an error (naming the option,
        not its value: :func:`misplaced`)."""
        for spec in self.specs():
            if spec.requires is not None and spec.name in opts and spec.requires not in opts:
                raise misplaced(opts, spec.name, f"to be set only together with {spec.requires}")

    def check_only_with(self, opts: Options, option: str, value: str) -> None:
        """Options that do not apply when ``option`` is ``value`` must not be given."""
        limited = [
            (spec, only)
            for spec in self.specs()
            if (only := spec.only_with) is not None and only.option == option
        ]
        # Named options first, then prefixes (their error names the option as given).
        limited.sort(key=lambda pair: isinstance(pair[0], PrefixOption))
        for spec, only in limited:
            if value in only.values or not spec.is_set(opts):
                continue
            if isinstance(spec, PrefixOption):
                name, subject = spec.given(opts)[0][0], spec.name + "*"
            else:
                name, subject = spec.name, "it"
            raise misplaced(
                opts,
                name,
                f"not to be set with {option}={value} ({subject} applies to {only.describe()})",
            )


def misplaced(opts: Options, name: str, expected: str) -> ConfigError:
    """An option given where it does not apply, named without its value: that says nothing
    the name does not, and it may be a secret (another consumer's token or DSN, the
    dead-letter topic's password)."""
    return ConfigError(name, NOT_SHOWN, expected, where=opts.where)


def render_markdown(rows: Iterable[Documented], headers: tuple[str, ...] = HEADERS) -> str:
    """A Markdown table of ``rows`` (specs, shared rows or :class:`DocRow`s), one per line."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for entry in rows:
        row = entry.doc_row()
        lines.append("| " + " | ".join(_cell(c, row.name) for c in row) + " |")
    return "\n".join(lines) + "\n"


def _cell(text: str, name: str) -> str:
    if "\n" in text:
        raise ValueError(f"option table row {name}: a cell must be one line: {text!r}")
    return text.replace("|", "\\|")
