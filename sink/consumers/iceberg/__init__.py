"""``consumer=iceberg``: each bundle is one Iceberg append commit, found again by its marker.

* :mod:`~sink.consumers.iceberg.iceberg_kind`: the kind the registry names (its options,
  staging, start check, consumer and sweep, pyiceberg imported only when used);
* :mod:`~sink.consumers.iceberg.iceberg_options`: the ``consumer.iceberg.*`` options and
  :class:`~sink.consumers.iceberg.iceberg_options.IcebergSettings`;
* :mod:`~sink.consumers.iceberg.iceberg_consumer`: delivery (one commit per bundle) and
  recovery (the bundle marker);
* :mod:`~sink.consumers.iceberg.iceberg_staging`: parts staged under the table's location
  and moved to data files;
* :mod:`~sink.consumers.iceberg.iceberg_table`: the catalog, the table, the input schema's
  mapping and the check when the query starts;
* :mod:`~sink.consumers.iceberg.iceberg_sweep`: the data files no snapshot references.
"""
