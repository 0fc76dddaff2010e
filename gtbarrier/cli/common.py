"""What the commands share: the pipeline arguments, ``--option`` parsing, the store.

Every command that reads a pipeline takes ``--pipeline ID`` and ``--state-uri URI``
(defaults: ``$GTBARRIER_PIPELINE``, ``$GTBARRIER_STATE_URI``) and the store's options
under the names the source and the sink use, ``--option s3.endpoint=http://...``
(repeated), or the AWS environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from urllib.parse import urlparse

from sink.dead_letters.dead_letter_files import DeadLetters, open_dead_letters
from state.errors import GtBarrierError
from state.layout import PipelineLayout, validate_pipeline_id
from state.options import Options
from state.protocol.barrier_state import load_barrier_state
from state.protocol.epoch_log import EpochLog
from state.records.barrier import BarrierState
from state.records.source_offset import SourceOffset
from state.stores import STORE_OPTIONS, StateStore, StoreConfig, is_s3_uri, new_store

PIPELINE_ENV = "GTBARRIER_PIPELINE"
STATE_URI_ENV = "GTBARRIER_STATE_URI"
DEAD_LETTERS_ENV = "GTBARRIER_DEAD_LETTERS"
# An operator waits for an answer: a store that does not answer fails the command in
# seconds, not after the sink's 30 s (``--option s3.retryDeadline=...`` overrides).
CLI_STORE_DEFAULTS = {"s3.retryDeadline": "10s", "s3.connectTimeout": "3s"}


class UsageError(GtBarrierError):
    """A command's arguments, or the pipeline they name, are wrong (exit code 2)."""


def add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    """``--pipeline``, ``--state-uri``, ``--option`` and ``--json``."""
    parser.add_argument(
        "--pipeline",
        default=os.environ.get(PIPELINE_ENV),
        help=f"the pipeline.id (default: ${PIPELINE_ENV})",
    )
    parser.add_argument(
        "--state-uri",
        default=os.environ.get(STATE_URI_ENV),
        help=f"the state.uri: file:///path or s3://bucket/prefix (default: ${STATE_URI_ENV})",
    )
    add_option_argument(parser)
    add_json_argument(parser)


def add_option_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a source/sink option, e.g. s3.endpoint=http://127.0.0.1:9000 (repeatable)",
    )


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def add_dead_letters_argument(parser: argparse.ArgumentParser, *, what: str) -> None:
    """``--dead-letters URI``: the sink's ``errors.deadLetter.path``."""
    parser.add_argument(
        "--dead-letters",
        default=os.environ.get(DEAD_LETTERS_ENV),
        metavar="URI",
        help=f"the sink's errors.deadLetter.path, file:///dir or s3://bucket/prefix, {what} "
        f"(S3 settings as for the store, via --option s3.*; default: ${DEAD_LETTERS_ENV})",
    )


def open_dead_letter_files(uri: str, config: StoreConfig) -> DeadLetters:
    """The dead-letter destination ``uri`` (with the S3 settings of ``config``);
    :class:`UsageError` unless it is a ``file:///``, ``s3://`` or ``s3a://`` URI."""
    parsed = urlparse(uri)
    local = parsed.scheme == "file" and parsed.netloc in ("", "localhost")
    if not (local and parsed.path.startswith("/")) and not is_s3_uri(uri):
        raise UsageError(
            f"--dead-letters {uri!r}: expected file:///absolute/dir or s3://bucket/prefix "
            "(or s3a://bucket/prefix; the sink's errors.deadLetter.path)"
        )
    return open_dead_letters(uri, config.s3)


def parse_options(pairs: list[str]) -> dict[str, str]:
    """``["a=1", "b=x=y"]`` -> ``{"a": "1", "b": "x=y"}``; :class:`UsageError` otherwise."""
    options: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--option {pair!r}: expected NAME=VALUE")
        options[name.strip()] = value
    return options


@dataclass(frozen=True)
class PipelineArgs:
    """The pipeline a command reads: its id, layout and store configuration."""

    pipeline_id: str
    layout: PipelineLayout
    config: StoreConfig
    options: dict[str, str]

    @classmethod
    def parse(
        cls, args: argparse.Namespace, *, prefixes: tuple[str, ...] = (), check: bool = True
    ) -> PipelineArgs:
        """Check the pipeline arguments. ``--option`` may name the store's options and
        any under ``prefixes``; ``check=False``: the caller checks them (the sink's)."""
        if not args.pipeline:
            raise UsageError(f"--pipeline is required (or ${PIPELINE_ENV})")
        if not args.state_uri:
            raise UsageError(f"--state-uri is required (or ${STATE_URI_ENV})")
        pipeline_id = validate_pipeline_id(args.pipeline, where="--pipeline")
        given = parse_options(args.option)
        opts = Options(given, where="--option")
        if check:
            opts.check_known(STORE_OPTIONS.names(), prefixes)
        merged = {**CLI_STORE_DEFAULTS, **given, "state.uri": args.state_uri}
        config = StoreConfig.from_options(Options(merged, where="--state-uri/--option"))
        return cls(pipeline_id, PipelineLayout(pipeline_id), config, given)

    def open_store(self) -> StateStore:
        """A new store (the caller closes it)."""
        return new_store(self.config)


@dataclass(frozen=True)
class PipelineRecords:
    """The pipeline's two root records, read once; a pipeline has at least one of them."""

    start: SourceOffset | None
    barrier: BarrierState
    barrier_written: bool


def read_pipeline(store: StateStore, layout: PipelineLayout) -> PipelineRecords:
    """The source's start and the barrier state; :class:`UsageError` if the store has
    neither (no pipeline of that id ever ran against it)."""
    start = EpochLog(store, layout).start()
    held = load_barrier_state(store, layout)
    barrier, version = held.state, held.version
    if start is None and version is None:
        raise UsageError(
            f"pipeline {layout.pipeline_id!r} not found in {store.uri}: it has neither "
            f"{layout.source_start} nor {layout.barrier_state} (check --pipeline and "
            "--state-uri)"
        )
    return PipelineRecords(start, barrier, version is not None)
