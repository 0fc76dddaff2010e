"""The barrier sink ("barrier"): bundles, the acknowledge protocol and its consumers."""

from sink.data_source import BarrierSink

__all__ = ["BarrierSink"]
