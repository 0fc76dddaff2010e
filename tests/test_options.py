"""``state.options.Options``: every accessor's error names the option, the value and
the expected form; the declarative specs and tables of ``state.option_table``."""

from __future__ import annotations

import pytest

from state.errors import ConfigError, UnknownOptionError
from state.option_table import (
    BooleanOption,
    ChoiceOption,
    DocRow,
    DurationOption,
    IntegerOption,
    OnlyWith,
    OptionSpec,
    OptionTable,
    PrefixOption,
    Shared,
    StringOption,
)
from state.options import Options, format_duration, parse_duration


def opts(**raw: str) -> Options:
    return Options(raw, where="gtkafka")


def error_of(fn: object) -> ConfigError:
    assert callable(fn)
    with pytest.raises(ConfigError) as info:
        fn()
    return info.value


def test_names_are_case_insensitive_and_kept_as_spelled() -> None:
    o = Options({"maxOffsetsPerTrigger": "10", "Kafka.Bootstrap.Servers": "h:1"}, where="x")
    assert o.raw("MAXOFFSETSPERTRIGGER") == "10"
    assert "maxoffsetspertrigger" in o
    assert "missing" not in o
    assert sorted(o.names()) == ["Kafka.Bootstrap.Servers", "maxOffsetsPerTrigger"]
    assert o.with_prefix("kafka.") == {"bootstrap.servers": "h:1"}


def test_string_and_required() -> None:
    o = opts(a=" v ", blank="  ")
    assert o.string("a") == "v"
    assert o.string("blank", "d") == "d"
    assert o.string("nope", "d") == "d"
    err = error_of(lambda: o.required("nope"))
    assert (err.option, err.value) == ("nope", None)
    assert str(err) == (
        "gtkafka: option 'nope' = <missing> is invalid: "
        "expected a non-empty value (this option is required)"
    )
    assert "'blank' = '  '" in str(error_of(lambda: o.required("blank")))


@pytest.mark.parametrize(
    ("value", "kw", "expected"),
    [
        ("ten", {}, "expected an integer"),
        ("1.5", {}, "expected an integer"),
        ("0", {"minimum": 1}, "expected an integer >= 1"),
        ("11", {"maximum": 10}, "expected an integer <= 10"),
        ("-3", {"minimum": 0, "maximum": 5}, "expected an integer between 0 and 5"),
    ],
)
def test_integer_errors(value: str, kw: dict[str, int], expected: str) -> None:
    err = error_of(lambda: opts(n=value).integer("n", **kw))
    assert f"option 'n' = {value!r} is invalid: {expected}" in str(err)
    assert err.option == "n" and err.value == value


def test_integer_values() -> None:
    assert opts(n=" 42 ").integer("n", minimum=0) == 42
    assert opts().integer("n", 7) == 7


@pytest.mark.parametrize(
    ("raw", "value"), [("true", True), ("ON", True), ("0", False), ("No", False)]
)
def test_boolean_values(raw: str, value: bool) -> None:
    assert opts(b=raw).boolean("b", not value) is value


def test_boolean_error() -> None:
    err = error_of(lambda: opts(failOnDataLoss="maybe").boolean("failOnDataLoss", True))
    assert "option 'failOnDataLoss' = 'maybe' is invalid: expected true or false" in str(err)
    assert opts().boolean("failOnDataLoss", True) is True


def test_choice() -> None:
    o = opts(delivery="AT-LEAST-ONCE")
    assert o.choice("delivery", ["exactly-once", "at-least-once"], "exactly-once") == (
        "at-least-once"
    )
    assert opts().choice("delivery", ["a", "b"], "a") == "a"
    err = error_of(lambda: opts(delivery="twice").choice("delivery", ["a", "b"], "a"))
    assert "option 'delivery' = 'twice' is invalid: expected one of 'a', 'b'" in str(err)


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("250ms", 0.25),
        ("30s", 30.0),
        ("5m", 300.0),
        ("2min", 120.0),
        ("1h", 3600.0),
        ("12", 12.0),
        (" 1.5 s ", 1.5),
        ("0", 0.0),
    ],
)
def test_duration_values(raw: str, seconds: float) -> None:
    assert opts(t=raw).duration("t", None) == pytest.approx(seconds)


@pytest.mark.parametrize("raw", ["soon", "5 days", "-1s", "1e3", ""])
def test_duration_errors(raw: str) -> None:
    err = error_of(lambda: opts(maxTriggerDelay=raw).duration("maxTriggerDelay", 1.0))
    assert f"option 'maxTriggerDelay' = {raw!r} is invalid" in str(err)
    assert "a duration such as '500ms', '30s', '5m'" in str(err)


def test_parse_duration_numbers_and_negative() -> None:
    assert parse_duration(3, option="x") == 3.0
    err = error_of(lambda: parse_duration(-2.0, option="x", where="sink"))
    assert str(err) == "sink: option 'x' = -2.0 is invalid: expected a non-negative duration"


def test_exactly_one_of() -> None:
    assert opts(subscribe="t").exactly_one_of("subscribe", "assign") == "subscribe"
    none = error_of(lambda: opts().exactly_one_of("subscribe", "subscribePattern", "assign"))
    assert "'subscribe/subscribePattern/assign' = 'none'" in str(none)
    assert "exactly one of 'subscribe', 'subscribePattern', 'assign'" in str(none)
    both = error_of(lambda: opts(subscribe="t", assign="{}").exactly_one_of("subscribe", "assign"))
    assert "'subscribe, assign'" in str(both)


def test_check_known() -> None:
    o = opts(subscribe="t", **{"kafka.x": "1", "path": "/p", "Typo": "1", "other": "2"})
    with pytest.raises(UnknownOptionError) as info:
        o.check_known(["subscribe"], prefixes=["kafka."])
    err = info.value
    assert err.options == ["Typo", "other"]
    text = str(err)
    assert text.startswith("gtkafka: unknown option(s) 'Typo', 'other'")
    assert "known options are: kafka.*, subscribe" in text
    opts(subscribe="t", checkpointLocation="/c").check_known(["SUBSCRIBE"])


def test_errors_are_fatal_value_errors() -> None:
    err = error_of(lambda: opts(n="x").integer("n"))
    assert isinstance(err, ValueError)
    assert not err.retriable


# --- declarative specs (state.option_table) ---------------------------------------------


def test_specs_read_typed_values_with_their_defaults_and_bounds() -> None:
    count = IntegerOption(name="count", default=3, minimum=0, doc="d")
    limit = IntegerOption(name="limit", default=None, minimum=1, doc="d")
    flag = BooleanOption(name="flag", default=False, doc="d")
    wait = DurationOption(name="wait", default=90.0, doc="d")
    timeout = DurationOption(name="timeout", default=None, positive=True, doc="d")
    mode = ChoiceOption(name="mode", choices=("fast", "safe"), default="safe", doc="d")
    assert (count.read(opts()), limit.read(opts()), flag.read(opts())) == (3, None, False)
    assert (wait.read(opts()), timeout.read(opts()), mode.read(opts())) == (90.0, None, "safe")
    o = opts(count="7", LIMIT="2", flag="on", wait="2m", timeout="500ms", mode="FAST")
    assert (count.read(o), limit.read(o), flag.read(o)) == (7, 2, True)
    assert (wait.read(o), timeout.read(o), mode.read(o)) == (120.0, 0.5, "fast")
    assert "expected an integer >= 1" in str(error_of(lambda: limit.read(opts(limit="0"))))
    err = error_of(lambda: timeout.read(opts(timeout="0s")))
    assert "'timeout' = '0s' is invalid: expected a positive duration" in str(err)
    assert "one of 'fast', 'safe'" in str(error_of(lambda: mode.read(opts(mode="slow"))))
    name = StringOption(name="name", required=True, doc="d")
    assert name.read(opts()) is None and name.read_required(opts(name=" n ")) == "n"
    assert "(this option is required)" in str(error_of(lambda: name.read_required(opts())))


def test_default_cells_of_the_docs() -> None:
    only_kafka = OnlyWith("consumer", ("kafka",))
    cells: list[OptionSpec] = [
        IntegerOption(name="n", default=30_000, doc="d"),
        IntegerOption(name="n", default=None, doc="d"),
        BooleanOption(name="b", default=True, doc="d"),
        DurationOption(name="t", default=900.0, doc="d"),
        ChoiceOption(name="c", choices=("a", "b"), default="b", doc="d"),
        StringOption(name="s", required=True, doc="d"),
        StringOption(name="s", required=True, only_with=only_kafka, doc="d"),
        StringOption(name="s", default_doc="AWS chain", doc="d"),
        PrefixOption(name="kafka.", doc="d"),
    ]
    assert [c.default_cell() for c in cells] == [
        "`30000`",
        "none",
        "`true`",
        "`15m`",
        "`b`",
        "required",
        "required for kafka",
        "AWS chain",
        "",
    ]
    assert PrefixOption(name="kafka.", doc="d").doc_row() == DocRow("`kafka.*`", "", "d")


def test_format_duration_reads_back() -> None:
    for seconds, text in [
        (900.0, "15m"),
        (30.0, "30s"),
        (0.5, "500ms"),
        (7200.0, "2h"),
        (90.0, "90s"),
        (0.0, "0s"),
    ]:
        assert format_duration(seconds) == text
        assert parse_duration(text, option="x") == seconds


TABLE = OptionTable(
    "t",
    (
        StringOption(name="consumer", doc="d"),
        StringOption(name="consumer.url", only_with=OnlyWith("consumer", ("http",)), doc="d"),
        PrefixOption(name="consumer.kafka.", only_with=OnlyWith("consumer", ("kafka",)), doc="d"),
        IntegerOption(name="min", default=None, doc="d"),
        DurationOption(name="delay", default=1.0, requires="min", doc="d"),
        Shared(
            OptionTable("shared", (StringOption(name="s3.region", doc="d"),)),
            default_doc="x",
            doc="shared",
        ),
    ),
)


def test_table_names_unknown_options_and_shared_rows() -> None:
    assert TABLE.names() == ("consumer", "consumer.url", "min", "delay", "s3.region")
    assert TABLE.prefixes() == ("consumer.kafka.",)
    TABLE.check_known(opts(**{"S3.Region": "x", "consumer.kafka.acks": "1", "path": "/p"}))
    with pytest.raises(UnknownOptionError) as info:
        TABLE.check_known(opts(**{"s3.regoin": "x"}))
    assert "known options are: consumer, consumer.kafka.*, consumer.url, delay" in str(info.value)
    assert TABLE.rows()[-1] == DocRow("`s3.region`", "x", "shared")


def test_table_checks_requires_and_only_with() -> None:
    TABLE.check_requires(opts(min="1", delay="5s"))
    err = error_of(lambda: TABLE.check_requires(opts(delay="5s")))
    assert err.option == "delay" and "to be set only together with min" in str(err)
    TABLE.check_only_with(opts(**{"consumer.url": "http://x"}), "consumer", "http")
    err = error_of(lambda: TABLE.check_only_with(opts(**{"consumer.url": "u"}), "consumer", "file"))
    assert str(err).endswith(
        "expected not to be set with consumer=file (it applies to consumer=http)"
    )
    given = opts(**{"Consumer.Kafka.Linger.Ms": "5"})
    err = error_of(lambda: TABLE.check_only_with(given, "consumer", "http"))
    assert err.option == "Consumer.Kafka.Linger.Ms"
    assert "(consumer.kafka.* applies to consumer=kafka)" in str(err)
