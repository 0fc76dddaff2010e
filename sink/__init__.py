"""The barrier sink ("barrier"): bundles, the acknowledge protocol and its consumers."""

from sink.data_source import BarrierSink
from sink.lost_inflight import resolve_lost_inflight

__all__ = ["BarrierSink", "resolve_lost_inflight"]
