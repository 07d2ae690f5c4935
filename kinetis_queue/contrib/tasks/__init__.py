"""The django.tasks integration: the backend (``backend``), its result store (``results``, a model of
the kinetis_queue app) and the django.tasks API on Django 6 or the 5.2 backport (``compat``)."""
