"""gtbarrier's demo: ``python -m demo`` (``make demo``).

Exactly-once from Kafka through a stateful PySpark query into a consumer, through a
driver killed with SIGKILL and a lost checkpoint, verified against a batch computation:

* :mod:`demo.runner`: the command (servers, produce, crash, recover, verify, figure);
* :mod:`demo.generator`: the seeded stream of orders and payments;
* :mod:`demo.pipeline`: the streaming query and the driver program;
* :mod:`demo.services`: Kafka (Tansu), S3 (SeaweedFS), ZooKeeper on loopback ports;
* :mod:`demo.verify`, :mod:`demo.plot`, :mod:`demo.progress`: the check, the figure, the log.
"""
