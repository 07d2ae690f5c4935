"""The live dashboard in the Django admin: one page per connection (issue 18 section 3).

Each page shows what an operator looks at first when something is wrong: every queue's ready, delayed,
reserved and failed counts and its paused state (from ``status.collect()``, the figures of
``queue_status``), deliveries and failures per minute over the last hour as server-rendered SVG bar
charts (charts.py; the history, observability/history.py), the slowest job classes, the running jobs
and the workers (the registry, observability/registry.py), the latest failed jobs, and links to the
failed jobs, schedules and chains and batches.

figures.py gathers those, views.py serves the page (and its live part alone, which a small script
refetches every few seconds: without JavaScript the page reads the same and is reloaded by hand).
The operations are the admin's own: Pause, Resume, Retry and Forget post to FailedJobAdmin's views
with a ``next`` back here; only Restart (``queue_restart``) has its view here. They ask for the
failed-jobs admin's permissions: "view" to see, "change" to pause, resume, retry and restart,
"delete" to forget. Nothing here shows a job's argument values: names, ids, counts and times only.
"""
