"""``consumer=kafka`` without a broker: how the tail scan reads a message's headers."""

from __future__ import annotations

from sink.consumers.kafka.kafka_consumer import sink_header
from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_INDEX


def test_the_sinks_header_is_the_last_of_its_name() -> None:
    """An item relayed from another gtbarrier pipeline carries that pipeline's gtb.* headers
    before the sink's own."""
    relayed = [(H_BUNDLE, b"999"), (H_INDEX, b"7"), ("trace", b"x"), (H_BUNDLE, b"4")]
    assert sink_header(relayed, H_BUNDLE) == 4
    assert sink_header(relayed, H_INDEX) == 7  # only the item's: not the sink's message
    assert sink_header([("trace", b"x")], H_BUNDLE) is None


def test_a_header_that_is_not_a_number_is_not_the_sinks() -> None:
    assert sink_header([(H_BUNDLE, b"abc")], H_BUNDLE) is None
    assert sink_header([(H_BUNDLE, None)], H_BUNDLE) is None
