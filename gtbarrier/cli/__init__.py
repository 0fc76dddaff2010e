"""The operator's command line: ``gtbarrier <command>`` (also ``python -m gtbarrier``).

================  ======================================================================
``status``        GT_last, in-flight bundle, owner, epochs, resume point, lag
``epochs``        the epoch log, or a range of it
``sweep``         staged parts and consumer leftovers no bundle references
``resolve-lost``  an in-flight bundle whose staged parts are gone: report it, or skip it
``retire``        a retired pipeline's state (store objects, znodes): list it, or delete it
``deadletters``   the rows the consumer refused (errors.tolerance=all), per bundle
``receiver``      the reference HTTP receiver (``consumer=http``)
``exporter``      the pipeline's Prometheus metrics at ``/metrics``
================  ======================================================================

Each command prints tables, or one JSON document with ``--json``. Exit codes: 0 done;
2 bad arguments, a pipeline that does not exist, or a store, Kafka or ZooKeeper that
cannot be reached (one line on stderr naming it); 1 any other failure.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from gtbarrier._version import __version__
from gtbarrier.cli import (
    deadletters,
    epochs,
    exporter,
    receiver,
    resolve_lost,
    retire,
    status,
    sweep,
)
from gtbarrier.cli.common import UsageError
from gtbarrier.cli.output import Result, render
from state.errors import (
    ConfigError,
    CoordinationError,
    GtBarrierError,
    RetriableError,
    StoreUnavailable,
)

PROG = "gtbarrier"
USAGE_EXIT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Operate gtbarrier pipelines: status, epoch log, leftovers, retiring, dead "
        "letters, receiver, metrics exporter.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="command", required=True)
    for module in (
        status,
        epochs,
        sweep,
        resolve_lost,
        retire,
        deadletters,
        receiver,
        exporter,
    ):
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the process's exit code."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == receiver.COMMAND:
        args.receiver_args = rest  # the receiver parses its own arguments
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    # A command reports an unreachable server in one line; kazoo's and kafka-python's
    # logs of each reconnection attempt would bury it.
    for noisy in ("kazoo", "kafka"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    where = f"{PROG} {args.command}"
    try:
        result: Result | None = args.run(args)
    except (UsageError, ConfigError) as err:
        return _fail(where, str(err), USAGE_EXIT)
    except StoreUnavailable as err:
        return _fail(where, f"the state store cannot be reached: {err}", USAGE_EXIT)
    except (RetriableError, CoordinationError) as err:
        return _fail(where, str(err), USAGE_EXIT)
    except GtBarrierError as err:
        return _fail(where, f"{type(err).__name__}: {err}", 1)
    if result is not None:
        print(render(result, as_json=args.json))
    return 0


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The console command: :func:`main`, then the process ends without the interpreter's
    teardown.

    A native thread pool left alive at teardown (pyarrow's, once a command read Parquet)
    can abort a command that has finished and written its output, with ``std::terminate``
    (exit -6). Every command closes its own clients, so the teardown has nothing left to
    do but flush, which is done here. An exception that escapes :func:`main` takes the
    normal path, with its traceback."""
    code = main(argv)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fail(where: str, message: str, code: int) -> int:
    print(f"{where}: error: {' '.join(message.split())}", file=sys.stderr)
    return code
