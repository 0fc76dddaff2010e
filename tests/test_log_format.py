"""The log's format (state.log_format): one JSON object per line with the context fields,
the figures and the traceback, never a secret; and the periodic summary
(state.log_summary): when it is due, what it counts, and that its counts start again."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from state import worker_logging
from state.errors import ConfigError
from state.kafka_redaction import REDACT
from state.log_format import (
    CONTEXT,
    FORMAT_ENV,
    JsonFormatter,
    fields,
    formatter,
    log_format,
)
from state.log_summary import (
    DEFAULT_SUMMARY_SECONDS,
    SUMMARY_ENV,
    PipelineCounts,
    Summaries,
    SummaryWindow,
    summary_interval,
)
from state.secrets import hide_in_logs

OURS = worker_logging.PRODUCT_LOGGERS


def record(
    msg: str,
    *args: object,
    extra: dict[str, Any] | None = None,
    exc_info: Any = None,
    level: int = logging.INFO,
    name: str = "sink.barrier",
) -> logging.LogRecord:
    """A record as ``logger.log`` makes it (through the process's record factory)."""
    logger = logging.getLogger(name)
    return logger.makeRecord(
        name, level, "f.py", 1, msg, args, exc_info, func="f", extra=extra, sinfo=None
    )


def json_line(rec: logging.LogRecord) -> dict[str, Any]:
    line = JsonFormatter().format(rec)
    assert "\n" not in line, "one record, one line"
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def test_a_json_line_holds_every_field() -> None:
    rec = record(
        "barrier: bundle %d delivered",
        7,
        extra=fields(
            pipeline="orders",
            query="q-1",
            batch=3,
            epoch=7,
            bundle=7,
            event="bundle_delivered",
            rows=100,
            seconds=0.25,
        ),
        level=logging.DEBUG,
    )
    line = json_line(rec)
    assert list(line) == ["time", "level", "logger", "message", *CONTEXT, "figures"]
    assert line["time"].endswith("+00:00") and "T" in line["time"]
    assert line["level"] == "DEBUG" and line["logger"] == "sink.barrier"
    assert line["message"] == "barrier: bundle 7 delivered"
    assert [line[k] for k in CONTEXT] == ["orders", "q-1", 3, 7, 7, "bundle_delivered"]
    assert line["figures"] == {"rows": 100, "seconds": 0.25}


def test_a_record_without_fields_has_them_null() -> None:
    line = json_line(record("plain %s", "text"))
    assert all(line[k] is None for k in CONTEXT) and line["figures"] == {}
    assert "exception" not in line and line["message"] == "plain text"


def test_a_figure_json_cannot_hold_is_shown_as_text() -> None:
    rec = record("x", extra={**fields(pipeline="p")})
    rec.gtbarrier_fields.figures["where"] = object  # type: ignore[attr-defined]
    assert json_line(rec)["figures"]["where"] == "<class 'object'>"


def test_an_exception_is_rendered_with_its_traceback_in_a_field() -> None:
    try:
        raise RuntimeError("the store said no\nsecond line")
    except RuntimeError:
        rec = record("commit failed", exc_info=sys.exc_info(), level=logging.ERROR)
    line = json_line(rec)
    assert line["message"] == "commit failed"
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert "RuntimeError: the store said no\nsecond line" in line["exception"]


def test_a_secret_in_the_message_args_fields_or_traceback_is_not_in_the_line() -> None:
    secret = "s3cr3t-json-logs-pw"
    hide_in_logs(secret)
    try:
        raise ValueError(f"login with {secret} refused")
    except ValueError:
        rec = record(
            "connecting with password %s to %r",
            secret,
            {"sasl.password": secret},
            extra=fields(pipeline=f"p-{secret}", event="connect", dsn=f"pg://u:{secret}@h/db"),
            exc_info=sys.exc_info(),
        )
    text = JsonFormatter().format(rec)
    assert secret not in text
    line = json.loads(text)
    assert "***" in line["message"] and "***" in line["exception"]
    assert line["pipeline"] == "p-***" and line["figures"]["dsn"] == "pg://u:***@h/db"


def test_a_kafka_secret_is_shown_as_its_fingerprint() -> None:
    """The Kafka client's filter (a fingerprint, not ``***``) redacts a JSON line too,
    also a record that reaches the formatter without passing the filter."""
    secret = "kafka-jaas-only-secret"
    REDACT.add(secret)
    rec = logging.LogRecord("other", logging.INFO, "f.py", 1, "jaas %s", (secret,), None)
    line = JsonFormatter().format(rec)
    assert secret not in line and "<secret " in line


def test_the_format_comes_from_the_environment() -> None:
    assert log_format({}) == "text" and log_format({FORMAT_ENV: ""}) == "text"
    assert log_format({FORMAT_ENV: " JSON "}) == "json"
    with pytest.raises(ConfigError) as info:
        log_format({FORMAT_ENV: "xml"})
    assert FORMAT_ENV in str(info.value) and "text, json" in str(info.value)
    assert isinstance(formatter("json"), JsonFormatter)
    assert not isinstance(formatter("text"), JsonFormatter)


def test_the_summary_interval_comes_from_the_environment() -> None:
    assert summary_interval({}) == DEFAULT_SUMMARY_SECONDS == 60
    assert summary_interval({SUMMARY_ENV: "5"}) == 5 and summary_interval({SUMMARY_ENV: "0"}) == 0
    for wrong in ("-1", "soon", "nan", "inf"):
        with pytest.raises(ConfigError):
            summary_interval({SUMMARY_ENV: wrong})


# --- the summary ---------------------------------------------------------------------


def test_the_first_event_is_reported_at_once_then_every_interval() -> None:
    window = SummaryWindow(60, now=100.0)
    assert not window.due(100.0), "nothing counted, nothing to report"
    window.planned("p", epoch=5, records=10)
    assert window.due(100.0)
    first = window.take(100.0)
    assert first.pipelines == {
        "p": PipelineCounts(epochs_planned=1, records_planned=10, newest_epoch=5)
    }
    window.planned("p", epoch=6, records=20)
    assert not window.due(159.9)
    assert window.due(160.0)


def test_a_report_counts_since_the_last_and_the_counts_start_again() -> None:
    window = SummaryWindow(60, now=0.0)
    window.take(0.0)
    window.planned("p", epoch=811, records=100)
    window.planned("p", epoch=812, records=200)
    window.delivered("p", epoch=811, rows=300, refused=2)
    window.dropped("p")
    window.delivered("q", epoch=4, rows=1)
    report = window.take(61.0)
    assert report.seconds == 61.0 and set(report.pipelines) == {"p", "q"}
    assert report.pipelines["p"] == PipelineCounts(
        epochs_planned=2,
        records_planned=300,
        bundles_delivered=1,
        rows_delivered=300,
        rows_refused=2,
        batches_dropped=1,
        newest_epoch=812,
        gt_last=811,
    )
    assert not window.due(1000.0), "the counts started again"
    assert window.take(1000.0).pipelines == {}


def test_a_report_says_what_happened() -> None:
    both = PipelineCounts(12, 3400, 12, 3400, newest_epoch=812, gt_last=811)
    assert both.describe("P", 60.0) == (
        "gtbarrier: pipeline P: 12 epoch(s) planned (3,400 records), 12 bundle(s) delivered "
        "(3,400 rows) in the last 60 s; newest epoch 812, GT_last 811"
    )
    sink_only = PipelineCounts(bundles_delivered=2, rows_delivered=5, rows_refused=1, gt_last=9)
    assert sink_only.describe("P", 60.4) == (
        "gtbarrier: pipeline P: 2 bundle(s) delivered (5 rows), 1 row(s) refused into dead "
        "letters in the last 60 s; GT_last 9"
    )
    dropped = PipelineCounts(batches_dropped=3)
    assert (
        dropped.describe("P", 1)
        == "gtbarrier: pipeline P: 3 replayed batch(es) dropped in the last 1 s"
    )


def test_summaries_log_a_due_report_at_info_with_its_figures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    summaries = Summaries(clock=lambda: now[0], interval=lambda: 60.0)
    caplog.set_level(logging.INFO, logger="state.log_summary")
    summaries.planned("p", 1, 10)  # the first: at once
    now[0] = 30.0
    summaries.planned("p", 2, 10)
    summaries.delivered("p", 1, 10)
    assert len(caplog.records) == 1
    now[0] = 61.0
    summaries.delivered("p", 2, 10)
    first, second = caplog.records
    assert first.levelno == second.levelno == logging.INFO
    assert first.getMessage().startswith("gtbarrier: pipeline p: 1 epoch(s) planned (10 records)")
    line = json_line(second)
    assert line["pipeline"] == "p" and line["event"] == "summary" and line["epoch"] == 2
    assert line["figures"]["epochs_planned"] == 1 and line["figures"]["bundles_delivered"] == 2
    assert line["figures"]["rows_delivered"] == 20 and line["figures"]["gt_last"] == 2
    assert line["figures"]["seconds"] == 61.0
    summaries.flush()
    assert len(caplog.records) == 2, "nothing counted since: nothing to flush"
    summaries.planned("p", 3, 1)
    summaries.flush()
    assert "1 epoch(s) planned (1 records)" in caplog.records[-1].getMessage()


# --- the handler of a Python worker --------------------------------------------------


@pytest.fixture
def unconfigured(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process as Spark starts a Python worker: gtbarrier's loggers without handlers
    (restored afterwards); :func:`bare_root` takes the root logger's (pytest's) away."""
    monkeypatch.setattr(worker_logging, "_configured", False)
    saved = {n: (logging.getLogger(n).handlers[:], logging.getLogger(n).level) for n in OURS}
    for name in OURS:
        monkeypatch.setattr(logging.getLogger(name), "handlers", [])
    yield
    for name, (handlers, level) in saved.items():
        logging.getLogger(name).handlers = handlers
        logging.getLogger(name).setLevel(level)


@contextmanager
def bare_root() -> Iterator[None]:
    """No handler on the root logger (pytest puts its own there for the test's call)."""
    root = logging.getLogger()
    handlers = root.handlers
    root.handlers = []
    try:
        yield
    finally:
        root.handlers = handlers


@pytest.mark.usefixtures("unconfigured")
def test_a_worker_writes_json_when_the_environment_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(FORMAT_ENV, "json")
    monkeypatch.delenv(worker_logging.LEVEL_ENV, raising=False)
    with bare_root():
        worker_logging.ensure_worker_logging()
    for name in OURS:
        [handler] = logging.getLogger(name).handlers
        assert isinstance(handler.formatter, JsonFormatter), name
    logging.getLogger("sink.barrier").info("hello %s", "json", extra=fields(pipeline="p"))
    [line] = capsys.readouterr().err.splitlines()
    assert json.loads(line)["message"] == "hello json" and json.loads(line)["pipeline"] == "p"


@pytest.mark.usefixtures("unconfigured")
def test_a_wrong_setting_fails_the_first_hook_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FORMAT_ENV, "yaml")
    with bare_root():
        for _ in range(2):  # not marked configured: the next hook fails the same way
            with pytest.raises(ConfigError, match=FORMAT_ENV):
                worker_logging.ensure_worker_logging()
        monkeypatch.setenv(FORMAT_ENV, "text")
        monkeypatch.setenv(SUMMARY_ENV, "-5")
        with pytest.raises(ConfigError, match=SUMMARY_ENV):
            worker_logging.ensure_worker_logging()
    assert all(not logging.getLogger(n).handlers for n in OURS)
