"""gtbarrier's demo: ``python -m demo`` (``make demo``).

For now this is the *foundation* demo (:mod:`demo.foundation`): it starts the real
servers gtbarrier runs against and moves data through each of them. The exactly-once
streaming job (gtkafka -> Spark -> barrier sink, with snapshots and failures) replaces
it as the main demo job.
"""
