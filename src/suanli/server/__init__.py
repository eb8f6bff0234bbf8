"""The live control plane: ``suanli serve``.

The same scheduler as the simulator, on wall-clock time, behind a REST API
(``api``), with its state in a database (``store``) and one thread that owns
the scheduler (``controller``).
"""
