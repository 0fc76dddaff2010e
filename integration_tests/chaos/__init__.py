"""A chaos run: randomized rounds of faults against real servers, checked for exactly-once.

``python -m integration_tests.chaos`` (``make chaos``) starts Kafka (Tansu), S3 (SeaweedFS, behind
a fault-injecting proxy), ZooKeeper, the reference HTTP receiver and, for some rounds, a
Spark standalone cluster, once, on free loopback ports; then runs rounds until enough
faults were injected. A round runs one query into one consumer under the snapshot
coordinator's supervised driver program, injects 1-3 faults drawn at random (seeded),
restarts the driver as an operator would, lets it finish all input, and compares what the
consumer holds with a failure-free reference. docs/chaos.md describes it.

Modules: :mod:`.options` (the command line), :mod:`.servers`, :mod:`.queries`,
:mod:`.consumers` (pluggable), :mod:`.faults`, :mod:`.job` and :mod:`.driver_program`
(the driver), :mod:`.drivers` (driver lives), :mod:`.rounds`, :mod:`.reference` and
:mod:`.checks` (the verdict), :mod:`.report` (table, JSON, plot).
"""
