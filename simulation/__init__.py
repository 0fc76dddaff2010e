"""A deterministic simulator of gtbarrier's protocol (not product code; see README.md).

It drives the product's real protocol code (epoch log, batch records, the barrier's
commit with its claims, fencing and cleanup, lost-bundle resolution, resume points) over
the memory store, with a model of Spark and of the snapshot coordinator, through every
interleaving of drivers, crashes, lost store answers and consumer failures that an
exploration reaches, and checks exactly-once, order and liveness after each step; with
poison rows in the input, also that the consumer's content and the dead letters together
are the output exactly once, at ``errors.tolerance=all`` and at ``none`` until the operator
switches to ``all``.
"""
