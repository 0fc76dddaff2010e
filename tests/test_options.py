"""``state.options.Options``: every accessor's error names the option, the value and
the expected form."""

from __future__ import annotations

import pytest

from state.errors import ConfigError, UnknownOptionError
from state.options import Options, parse_duration


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


@pytest.mark.parametrize(("raw", "value"), [("true", True), ("ON", True), ("0", False),
                                            ("No", False)])
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
    [("250ms", 0.25), ("30s", 30.0), ("5m", 300.0), ("2min", 120.0), ("1h", 3600.0),
     ("12", 12.0), (" 1.5 s ", 1.5), ("0", 0.0)],
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
