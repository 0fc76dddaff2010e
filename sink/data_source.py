"""``BarrierSink``: the ``barrier`` data source (a streaming sink only).

PySpark's lookup of Python data sources, at a JVM's first registration, imports this module
in a process of its own only to read :meth:`BarrierSink.name`: what a query needs (the
option table, the consumers' kinds, pyarrow, the writer) is imported when Spark makes the
source or asks for its writer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

from state.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from sink.options import SinkOptions
    from sink.writer import BarrierStreamWriter


class BarrierSink(DataSource):
    """Exactly-once delivery of a streaming query's output, bundle by bundle, in gt order.

    Options are parsed in every instance Spark makes. The first is made when Spark plans
    the query's first micro-batch, so a bad option stops the query before any task runs.

    The instance that commits carries the generation its run started at
    (:attr:`start_generation`), the run's memory that it may claim the pipeline only over
    that generation (:func:`~state.protocol.barrier_state.decide_claim`). Spark 4.3 makes
    that instance once per query run, when the run's first commit (or abort) needs it
    (``PythonStreamingWrite.commit`` -> ``PythonDataSourceV2.getOrCreateDataSourceInPython``,
    cached for the run: ``pyspark/sql/worker/create_data_source.py``), pickles it, and every
    commit of the run unpickles those same bytes and calls :meth:`streamWriter`
    (``pyspark/sql/worker/python_streaming_sink_runner.py``). So the generation is read when
    Spark pickles it (:meth:`__getstate__`): the instances Spark makes for every
    micro-batch's write tasks (``write_into_data_source.py``) are never pickled, and read
    nothing.
    """

    def __init__(self, options: dict[str, str]) -> None:
        from sink.options import SinkOptions

        super().__init__(options)
        self.sink_options: SinkOptions = SinkOptions.parse(options)
        self.start_generation: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What Spark pickles: the options and the run's start generation, read from the
        barrier state the first time this instance is pickled (class docstring)."""
        if self.start_generation is None:
            from state.layout import PipelineLayout
            from state.protocol.barrier_state import start_generation
            from state.stores import open_store

            store = open_store(self.sink_options.store)
            try:
                layout = PipelineLayout(self.sink_options.pipeline_id)
                self.start_generation = start_generation(store, layout)
            finally:
                store.close()
        return dict(self.__dict__)

    @classmethod
    def name(cls) -> str:
        return "barrier"

    def streamWriter(self, schema: StructType, overwrite: bool) -> BarrierStreamWriter:
        """The writer of the query's micro-batches, once the consumer's kind has checked,
        before any data moves, that it can take them (its start check may complete the
        options the tasks receive, e.g. with a table's location)."""
        from sink.gt_column import check_spark_schema
        from sink.writer import BarrierStreamWriter

        has_gt = check_spark_schema(schema)
        return BarrierStreamWriter(
            self.sink_options.check_at_start(schema), has_gt, self.start_generation
        )

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        raise ConfigError(
            "format",
            "barrier",
            "writeStream: the barrier sink delivers streaming micro-batches",
            where="barrier",
        )
