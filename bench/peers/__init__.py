"""kinetis-queue beside its peers (issue 14): ``python -m bench.peers``, run by ``make bench-peers``.

Runs in its own venv (.venv-bench: the project plus the ``bench`` extra), since the peers bring
libraries the project does not need. See __main__.py for what is measured and how.
"""
