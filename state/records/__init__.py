"""The protocol's stored records, one codec each (docs/PROTOCOL.md).

The lowest layer of gtbarrier: frozen dataclasses with ``to_json()`` and
``from_json(raw)``, importing nothing but :mod:`state.errors` and the standard library
(pyspark and pyarrow only inside the functions of :mod:`state.records.gt`). Every reader
and writer of a record goes through its class here; no other module builds or parses
the JSON by hand.

========================================  =========================================================
Module                                    Records
========================================  =========================================================
:mod:`state.records.codec`                canonical JSON (``dumps``), checked decoding (``Fields``)
:mod:`state.records.gt`                   the ``gt`` struct (Spark and Arrow types), ``GlobalTime``
:mod:`state.records.source_offset`        ``SourceOffset`` (Spark's offset; ``source/start.json``)
:mod:`state.records.floor`                ``FloorRecord``, ``SegmentRef`` (``source/floor.json``)
:mod:`state.records.epoch`                ``EpochRecord`` (``epochs/<k>.json``)
:mod:`state.records.epoch_segment`        ``EpochSegment`` (``epochs/segments/``)
:mod:`state.records.batch`                ``BatchRecord`` (``batches/<queryId>/<batchId>.json``)
:mod:`state.records.barrier`              ``BarrierState``, ``Owner``, ``RunMarker`` (``barrier/``)
:mod:`state.records.inflight_bundle`      ``InflightBundle``, ``StagedPart`` (the in-flight bundle)
:mod:`state.records.resume_point`         ``ResumePoint``, ``SnapshotRef``
:mod:`state.records.manifest`             ``Manifest``, ``ManifestEntry`` (a snapshot's manifest)
:mod:`state.records.driver`               ``DriverRecord``, ``DriverOwner`` (the fencing token)
:mod:`state.records.checkpoint_marker`    ``CheckpointMarker`` (a local checkpoint's generation)
========================================  =========================================================

Decoding is tolerant of every record earlier gtbarrier versions wrote (a missing
``format`` field is format 1; each earlier shape has golden bytes in
``tests/golden/records/``) and strict about everything else: a malformed record raises
:class:`~state.errors.MalformedRecord` naming the record, the field and what was expected
(a source offset raises :class:`~state.errors.MalformedOffset`), a record of a newer
format :class:`~state.errors.UnsupportedFormat`.
"""
