"""``consumer=kafka``: each item becomes a message of ``consumer.topic``, sent in one
transaction per delivery attempt and found again by the tail of the topic.

* :mod:`~sink.consumers.kafka.kafka_kind`: the kind the registry names (its options, the
  check when the query starts: the input's shape and the topic's partitions, and the
  consumer it opens);
* :mod:`~sink.consumers.kafka.kafka_options`: the ``consumer.kafka.*`` and
  ``consumer.topic`` options, :class:`~sink.consumers.kafka.kafka_options.KafkaTopicSettings`,
  and the producer's settings and configuration (its ``transactional.id``), also those of
  the dead-letter topic's producer;
* :mod:`~sink.consumers.kafka.kafka_consumer`:
  :class:`~sink.consumers.kafka.kafka_consumer.KafkaTopicConsumer`: delivery (one
  transaction per attempt), fencing and the tail scan;
* :mod:`~sink.consumers.kafka.kafka_rows`: what a row becomes (the sink's ``gtb.*``
  headers) and the rows that cannot become a message.
"""
