"""Real-server fixtures for the integration tests.

The servers themselves are in the pytest-free ``harness`` package (also used by the
demo and the benchmarks); each ``integration_tests/fixtures/`` module wraps one of them
in pytest fixtures and is registered here as a plugin. See ``integration_tests/README.md``
for the fixtures and the environment variables that point them at external servers.
"""

pytest_plugins = [
    "integration_tests.fixtures.logs",
    "integration_tests.fixtures.process",
    "integration_tests.fixtures.s3",
    "integration_tests.fixtures.object_stores",
    "integration_tests.fixtures.kafka",
    "integration_tests.fixtures.zookeeper",
    "integration_tests.fixtures.spark",
    "integration_tests.fixtures.spark_connect",
    "integration_tests.fixtures.receiver",
    "integration_tests.fixtures.postgres",
]
