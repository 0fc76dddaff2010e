"""Dead letters: the rows a consumer's target refuses, one file per bundle.

The write tasks validate their rows (:meth:`sink.consumers.consumer_kind.ConsumerKind.validate`,
plus the checks every consumer shares, :mod:`sink.write_task`); with
``errors.tolerance=all`` a task stages the rows refused as a *dead-letter part* next to its
part, with ``_gtb_reason`` and ``_gtb_column`` added. When and how the barrier turns them
into the bundle's file (``bundle-<k>.parquet`` under ``errors.deadLetter.path``) and
sends them to the optional topic is docs/PROTOCOL.md's "Dead letters": every write after
the compare-and-swap that records the bundle in flight, the file created once.

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
  dead letters: reconciled against a file already there before the bundle is recorded in
  flight (read only), published after.
"""
