"""``gtbarrier receiver``: the reference HTTP receiver for ``consumer=http``.

The same program as ``python -m gtbarrier.http_receiver`` (Starlette on uvicorn, bundles in SQLite);
it needs the ``receiver`` extra: ``pip install 'gtbarrier[receiver]'``. ``--tls-cert`` and
``--tls-key`` serve HTTPS; ``--token-file`` (or ``--token``, a value or a secret reference)
requires a bearer token of every request (``consumer.http.token`` on the sink's side). It
does not start without one unless ``--insecure-no-token`` (local tests only) is given; a
body over ``--max-body-bytes`` is answered 413.
"""

from __future__ import annotations

import argparse
from typing import Any

from gtbarrier.cli.common import UsageError
from gtbarrier.cli.output import Result
from gtbarrier.help_text import plain_help

COMMAND = "receiver"
EXTRA_MODULES = ("starlette", "uvicorn")


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        COMMAND,
        help="run the reference HTTP receiver (consumer=http; HTTPS and a bearer token)",
        description=plain_help(__doc__),
        add_help=False,
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result | None:
    """Hand the arguments (``args.receiver_args``, everything after ``receiver``) to
    :func:`gtbarrier.http_receiver.main`, which parses them and prints its own help."""
    try:
        from gtbarrier import http_receiver as receiver
    except ImportError as err:
        if err.name and err.name.split(".")[0] in EXTRA_MODULES:
            raise UsageError(
                f"gtbarrier receiver needs {err.name}, which comes with the receiver extra: "
                "pip install 'gtbarrier[receiver]'"
            ) from err
        raise
    receiver.main(list(args.receiver_args), prog="gtbarrier receiver")
    return None
