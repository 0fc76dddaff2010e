"""Dead letters: the rows a consumer's target refuses, written once per bundle.

The write tasks validate their rows before anything of the bundle is delivered
(:meth:`sink.consumers.consumer_kind.ConsumerKind.validate`, plus the checks every
consumer shares, :mod:`sink.write_task`). With ``errors.tolerance=all`` a task stages the
rows refused as a *dead-letter part* next to its part, with two columns added:
``_gtb_reason`` and ``_gtb_column``. Before the bundle is recorded in flight (so before
anything of it is delivered) the barrier writes the bundle's dead-letter parts as one
file of ``errors.deadLetter.path`` (``file:///dir`` or ``s3://bucket/prefix``)::

    bundle-000000000007.parquet   the rows bundle 7 refused: the sink's input columns as
                                  they were (names and types), then _gtb_bundle (long),
                                  _gtb_reason (string) and _gtb_column (string, null
                                  when the row as a whole was refused)

The file is named by the bundle id and only ever created, so a bundle's dead letters are
written once; with ``errors.deadLetter.topic`` they are also sent to a Kafka topic, once
too.

* :mod:`~sink.dead_letters.dead_letter_settings`: ``errors.*`` as parsed
  (:class:`~sink.dead_letters.dead_letter_settings.DeadLetterSettings`, the tolerances);
* :mod:`~sink.dead_letters.dead_letter_format`: what a dead-letter file holds: the rows
  refused (one rejection per row), its columns, name and Parquet metadata keys, and its
  rows as JSON;
* :mod:`~sink.dead_letters.dead_letter_files`: the files of ``errors.deadLetter.path``
  (``file://`` or ``s3://``): created once, listed and read back (``gtbarrier
  deadletters``);
* :mod:`~sink.dead_letters.dead_letter_topic`: the optional topic: the rows as messages
  with their context headers, sent through the kafka consumer;
* :mod:`~sink.dead_letters.dead_letter_settlement`: what the barrier does with a bundle's
  dead letters before it is recorded in flight: the file written or found, the rows an
  earlier attempt's file holds kept out of the delivery, the file replaced or the commit
  stopped when this attempt refuses a row the file lacks.
"""
