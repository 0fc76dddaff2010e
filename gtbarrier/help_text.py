"""Command-line help from docstrings: the reST a docstring needs for the API reference is
noise in a terminal, so every ``--help`` text goes through :func:`plain_help`."""

from __future__ import annotations

import re

#: `` (:meth:`~a.b.c`)``: a parenthetical that is only a cross-reference says nothing to an
#: operator, so it goes with its leading space.
_REFERENCE_ASIDE = re.compile(r"\s?\(:[a-z]+:`[^`]+`\)")
#: ``:role:`~a.b.Name``` / ``:role:`a.b.Name``` / ``:role:`Text <target>```.
_ROLE = re.compile(r":[a-z]+:`(~?)([^`<]*?)\s*(?:<[^`>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
#: ``Secured::`` introduces a literal block; in plain text it is one colon.
_BLOCK_MARKER = re.compile(r"::$", re.MULTILINE)


def _role(match: re.Match[str]) -> str:
    short, text = match.group(1), match.group(2)
    if short:
        # Sphinx shows the last two parts of ~a.b.Class.method as Class.method only when
        # asked; the last part alone reads as a name in a sentence.
        return text.rsplit(".", 1)[-1]
    return text


def plain_help(doc: str | None) -> str:
    """``doc`` without reST markup: cross-reference-only parentheticals dropped, roles as
    their (short, for ``~``) target, inline literals as their text, ``::`` as ``:``. Line
    breaks and indentation are kept (a raw help formatter shows them as written)."""
    if not doc:
        return ""
    text = _REFERENCE_ASIDE.sub("", doc)
    text = _ROLE.sub(_role, text)
    text = _LITERAL.sub(r"\1", text)
    return _BLOCK_MARKER.sub(":", text)


__all__ = ["plain_help"]
