"""Benchmarks of kinetis_queue against bare driver loops (``make bench`` / ``python -m bench``).

For each SQL database (PostgreSQL, MariaDB, SQLite) the run measures push/s and drain jobs/s of
the project, and of a bare reference written directly on the driver (bench/bare.py) in the same
run: absolute rates depend on the machine, so speed claims are the ratios between the two.
This package is also the Django app ``bench`` of bench.settings, which holds the job (bench/jobs.py).
"""

from __future__ import annotations
