"""Real-server fixtures for the integration tests.

Each server lives in its own module under ``integration_tests/fixtures/`` and is
registered here as a pytest plugin. See ``integration_tests/README.md`` for the
fixtures and the environment variables that point them at external servers.
"""

# Order matters: a module must be registered (so pytest rewrites its asserts) before
# another plugin imports it; the server modules import logs and process.
pytest_plugins = [
    "integration_tests.fixtures.logs",
    "integration_tests.fixtures.process",
    "integration_tests.fixtures.s3",
    "integration_tests.fixtures.kafka",
    "integration_tests.fixtures.zookeeper",
    "integration_tests.fixtures.spark",
]
