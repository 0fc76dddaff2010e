"""The protocol: one module per shared record, owning its reads, its writes and its rules.

Spark-free and thread-free; the Spark adapters (``datasource``, ``sink``) and the snapshot
coordinator call it, and the simulator (``simulation``) drives it whole.
"""
