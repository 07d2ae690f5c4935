"""Django integrations built on the contract core: one module or package per integration.

Each one is a client of the core (``Queue.prepare``/``send``, ``Job``, the worker's signals) and
nothing in the core depends on it, except the few entry points Django needs at fixed places
(``kinetis_queue.tasks`` for ``TASKS``, the app's ``ready()``, the models module, a management
command). Today: ``tasks`` (the django.tasks backend), ``receivers`` (queued signal receivers) and
``mail`` (queued email).
"""
