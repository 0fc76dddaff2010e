"""``consumer=kafka`` with real Spark drivers killed by SIGKILL at a protocol step
(``GTBARRIER_FAULT``, docs/sink.md), then restarted: every item in the output topic once.

The driver (integration_tests/kafka_sink_driver_program.py) passes its input's headers on,
as a pipeline reading another gtbarrier pipeline's output with ``includeHeaders=true``
does: the items arrive carrying ``gtb.*`` headers of their own.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_COUNT, H_GT, H_INDEX
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.stores import open_store

PROGRAM = Path(__file__).with_name("kafka_sink_driver_program.py")
DRIVER_TIMEOUT = 240.0


def last(headers: list[tuple[str, bytes]], name: str) -> bytes:
    """The last header called ``name``: the sink's own come after the item's."""
    values = [v for k, v in headers if k == name]
    assert values, f"no {name} header in {headers}"
    return values[-1]


def upstream_headers(i: int, n: int) -> list[tuple[str, bytes]]:
    """What item ``i`` carries from an upstream gtbarrier pipeline (bundle 999)."""
    return [
        (H_BUNDLE, b"999"),
        (H_GT, b"999"),
        (H_INDEX, b"%d" % i),
        (H_COUNT, b"%d" % n),
        ("trace", b"t%d" % i),
    ]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_items_with_gtb_headers_of_their_own_are_delivered_once_after_a_kill(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    """Killed half-way through bundle 1, the restart resolves it from the sink's own headers
    (not the items' ``gtb.bundle=999``): no bundle taken as delivered, no index sent twice.
    Killed again once bundle 2 is acknowledged, the next restart finds it whole."""
    n, partitions = 3_000, 2
    topic = kafka.create_topic(partitions=partitions)
    out = kafka.create_topic(partitions=3)
    kafka.produce(
        topic,
        ((b"k%d" % i, b"%d" % i, upstream_headers(i, n), i % partitions) for i in range(n)),
        batch_size=1000,
    )
    state = f"file://{tmp_path}/state"
    args = [
        "--bootstrap", kafka.bootstrap, "--topic", topic, "--out-topic", out,
        "--pipeline", "relay", "--state", state, "--checkpoint", str(tmp_path / "cp"),
    ]  # fmt: skip

    first = driver.run(PROGRAM, *args, env={"GTBARRIER_FAULT": "after_deliver:1"})
    code = first.wait(DRIVER_TIMEOUT)
    assert code == -signal.SIGKILL, f"driver exited {code}, not killed:\n{first.output()[-3000:]}"
    barrier = read_barrier_state(open_store(state), PipelineLayout("relay"))
    assert barrier.inflight is not None and barrier.inflight.bundle_id == 1
    assert 0 < len(kafka.consume_all(out)) < 2 * 1000  # bundle 0 and part of bundle 1

    # the restart completes bundle 1, then dies once bundle 2's transaction is committed
    # (acknowledged) but before GT_last moves: the next restart finds it in the topic
    second = driver.run(PROGRAM, *args, env={"GTBARRIER_FAULT": "after_ack:2"})
    code = second.wait(DRIVER_TIMEOUT)
    assert code == -signal.SIGKILL, f"driver exited {code}, not killed:\n{second.output()[-3000:]}"
    barrier = read_barrier_state(open_store(state), PipelineLayout("relay"))
    assert (barrier.gt_last, barrier.inflight and barrier.inflight.bundle_id) == (1, 2)

    final = driver.run(PROGRAM, *args)
    assert final.wait(DRIVER_TIMEOUT) == 0, final.output()[-3000:]
    barrier = read_barrier_state(open_store(state), PipelineLayout("relay"))
    assert (barrier.gt_last, barrier.inflight) == (2, None)

    records = kafka.consume_all(out)
    copies = Counter(
        (int(last(r.headers, H_BUNDLE)), int(last(r.headers, H_INDEX))) for r in records
    )
    twice = sorted(k for k, c in copies.items() if c > 1)
    assert not twice, f"{len(twice)} item(s) delivered more than once, e.g. {twice[:5]}"
    counts = {int(last(r.headers, H_BUNDLE)): int(last(r.headers, H_COUNT)) for r in records}
    assert sum(counts.values()) == n and sorted(counts) == [0, 1, 2]
    assert set(copies) == {(b, i) for b, c in counts.items() for i in range(c)}
    # every item keeps its own headers, in order, before the sink's four
    for r in records:
        i = int(r.value)
        assert r.key == b"k%d" % i
        assert r.headers[:5] == upstream_headers(i, n)
        assert [k for k, _ in r.headers[5:]] == [H_BUNDLE, H_GT, H_INDEX, H_COUNT]
