"""``consumer=postgres``: each bundle's rows and its id in one PostgreSQL transaction.

* :mod:`~sink.consumers.postgres.postgres_kind`: the kind the registry names (its options,
  staging, start check and consumer, psycopg imported only when used);
* :mod:`~sink.consumers.postgres.postgres_options`: the ``consumer.postgres.*`` options and
  :class:`~sink.consumers.postgres.postgres_options.PostgresSettings`;
* :mod:`~sink.consumers.postgres.postgres_consumer`: delivery, recovery and the start check;
* :mod:`~sink.consumers.postgres.postgres_connections`: the connections kept per process
  and the translation of psycopg's errors;
* :mod:`~sink.consumers.postgres.postgres_columns`: the input's types as PostgreSQL columns,
  and rows as ``COPY`` CSV.
"""
