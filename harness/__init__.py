"""The servers gtbarrier's tests, demo and benchmarks run against, without pytest.

Real Kafka (Tansu), S3 (SeaweedFS; moto on request), ZooKeeper and Spark on free loopback
ports, each stopped by pid (:mod:`harness.server` is their base), or external servers
named by ``GTB_KAFKA_BOOTSTRAP``, ``GTB_S3_ENDPOINT``, ``GTB_ZK_HOSTS`` and
``GTB_SPARK_MASTER``; driver programs in killable subprocesses (:mod:`harness.driver`;
what such a program does around its query: :mod:`harness.driver_program`); a
fault-injecting TCP proxy (:mod:`harness.fault_proxy`); and a registry of their logs
(:mod:`harness.logs`) that the pytest fixtures in ``integration_tests/fixtures/`` print
when a test fails.

Imported from the repository root like ``demo`` and ``benchmarks``; not part of the
installed distribution, and nothing in ``datasource``, ``sink`` or ``state`` imports it.
"""
