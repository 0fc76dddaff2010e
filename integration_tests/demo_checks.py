"""What a demo run (``python -m demo``) must have printed: its verification table with
nothing duplicated or missing and equal stateful results, and its steps in order. Used by
the standalone-cluster demo test and by notebook 02's test (whose demo runs in local
mode)."""

from __future__ import annotations

from demo.verify import parse_table

#: What the demo does, in the order it must print it.
STEPS = (
    "produced",
    "SIGKILL driver 1",
    "deleted its checkpoint directory",
    "coordinator.recover() -> materialise",
    "recovered: first new bundle",
    "end-of-stream heartbeats processed",
)


def check_demo_output(out: str, events: int) -> dict[str, str]:
    """Assert the demo's table and steps in ``out``; the table's rows."""
    table = parse_table(out)
    assert table, f"no verification table in the output:\n{out[-4000:]}"
    assert table["records in"] == f"{events:,}"
    assert table["duplicates"] == "0"
    assert table["missing"] == "0"
    assert table["in GT order"] == "yes"
    assert table["stateless results equal"] == "yes"
    assert table["stateful results equal"].startswith("yes ")
    assert table["verdict"] == "PASS"
    assert int(table["bundles delivered"]) >= 5
    assert table["recovery"].startswith("recover(): materialise")
    assert float(table["recovery time"].split()[0]) > 0
    positions = [out.find(s) for s in STEPS]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), positions
    return table
