"""A pipeline's Prometheus metrics, one home for both endpoints that serve them (the
coordinator's ``metrics_port`` and ``gtbarrier exporter``):

* :mod:`~state.metrics.definitions`: every metric, declared once (name, type, labels,
  HELP, and its row of the docs table);
* :mod:`~state.metrics.reading`: what a scrape reads, the store's facts
  (:class:`~state.metrics.reading.StoreFacts`, read by
  :class:`~state.metrics.reading.StateReader`) embedded in the
  :class:`~state.metrics.reading.PipelineReading` that adds what the store does not hold;
* :mod:`~state.metrics.families`: the metric families computed (pure) from a reading;
* :mod:`~state.metrics.server`: the collector and the server of ``/metrics``;
* :mod:`~state.metrics.probes`: ``/healthz`` and ``/ready`` beside it;
* :mod:`~state.metrics.access`: who may scrape (TLS, client certificates, basic auth).

Above :mod:`state.protocol`, below :mod:`state.coordinator`. Importing the package loads
nothing; ``reading``, ``probes`` and ``access`` need no ``prometheus_client`` (an
optional extra), the other modules do.
"""
