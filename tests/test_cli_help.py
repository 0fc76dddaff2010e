"""What ``gtbarrier --help`` and every command's ``--help`` print is for an operator: plain
text, no Sphinx markup from the docstrings it is made from, and no test hooks."""

from __future__ import annotations

import argparse
import re

import pytest

from gtbarrier.cli import build_parser, main
from gtbarrier.help_text import plain_help

#: reST that must not reach a terminal: roles, inline literals, literal-block markers.
MARKUP = re.compile(r":[a-z]+:`|``|::$", re.MULTILINE)
#: Options that exist for tests only.
HOOKS = ("--drop-after-store", "Fault injection")


def commands() -> list[str]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(sub.choices)


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    out: str = capsys.readouterr().out
    assert out.startswith("usage: gtbarrier"), out[:200]
    return out


def test_the_commands_include_the_lost_bundle_way_out() -> None:
    assert {"status", "epochs", "sweep", "deadletters", "receiver", "exporter"} < set(commands())
    assert "resolve-lost" in commands() and "retire" in commands()


@pytest.mark.parametrize(
    "command", [(), *((c,) for c in commands())], ids=lambda c: " ".join(c) or "gtbarrier"
)
def test_help_is_plain_text_without_test_hooks(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    text = help_of(capsys, *command)
    found = MARKUP.findall(text)
    assert not found, f"gtbarrier {' '.join(command)} --help shows reST markup {found}:\n{text}"
    for hook in HOOKS:
        assert hook not in text, f"gtbarrier {' '.join(command)} --help shows {hook!r}"


def test_plain_help_drops_cross_references_and_literal_markup() -> None:
    doc = (
        "``gtbarrier sweep``: staged parts (:meth:`~a.b.Kind.find`) no bundle references;\n"
        "it claims the barrier (:mod:`sink.cleanup`), see :class:`~x.y.Store` and\n"
        ":func:`z.resolve`. Secured::\n\n    gtbarrier receiver --port 1\n"
    )
    assert plain_help(doc) == (
        "gtbarrier sweep: staged parts no bundle references;\n"
        "it claims the barrier, see Store and\n"
        "z.resolve. Secured:\n\n    gtbarrier receiver --port 1\n"
    )
