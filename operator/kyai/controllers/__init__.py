"""The operator's reconcilers: one module per kind, the kopf handlers in ``handlers``.

``scheduling`` decides when runs are looked at (watch events, requeues, the resync's
policies); ``evaluationrun`` is the run engine's public face, ``_engine`` its state machine
and ``_jobs`` its worker Jobs; ``kinds`` holds the kinds of run, which see the engine only
through ``runkind``; ``_references`` is what kinds read when a run starts; ``_status`` is the
one status writer of the controllers.
"""
