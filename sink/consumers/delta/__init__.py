"""``consumer=delta``: each bundle is one Delta Lake commit carrying the pipeline's
application transaction id (app id = ``pipeline.id``, version = the bundle id).

* :mod:`~sink.consumers.delta.delta_kind`: the kind the registry names (its options, start
  check, validation and consumer, ``deltalake`` imported only when used);
* :mod:`~sink.consumers.delta.delta_options`: the ``consumer.delta.*`` options and
  :class:`~sink.consumers.delta.delta_options.DeltaSettings`;
* :mod:`~sink.consumers.delta.delta_table`: storage options (secret references resolved),
  opening and creating the table, the check that it takes the input's columns;
* :mod:`~sink.consumers.delta.delta_staging`: ``mode=append``'s parts staged under the
  table and moved to its data files;
* :mod:`~sink.consumers.delta.delta_stats`: an ``add`` action's statistics from a Parquet
  footer;
* :mod:`~sink.consumers.delta.delta_consumer`: delivery (one commit per bundle, append or
  merge) and recovery (the transaction id).
"""
