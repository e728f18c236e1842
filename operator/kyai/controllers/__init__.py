"""The operator's reconcilers: one module per kind, the kopf handlers in ``handlers``.

``evaluationrun`` is the run's state machine; ``_plan`` resolves what a run needs when it
starts; ``_status`` is the one status writer of the three controllers.
"""
