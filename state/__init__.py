"""The state of a gtbarrier pipeline and its rules, in layers:

* the kernel (this package's modules): errors, retries, options, the key layout, the
  process cache, timing, Spark's task properties, and :mod:`state.records` (one codec per
  stored record);
* :mod:`state.stores`: the store contract, its ``memory://``, ``file://`` and ``s3://``
  implementations and the factory;
* :mod:`state.protocol`: one module per shared record, with the rules that go with it;
* :mod:`state.coordinator`: the snapshot coordinator (users import it from ``gtbarrier``).
"""
