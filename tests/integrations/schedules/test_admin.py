"""The admin's schedule list: the lines of ``queue_schedule --list``, read-only, behind the view permission."""

from __future__ import annotations

import math
import time
import uuid

from django.contrib.auth.models import Permission, User
from django.test import Client

from kinetis_queue.schedules.scheduler import Scheduler
from kinetis_queue.schedules.stores import tick_job_id
from tests.integrations.schedules.support import build, declared, unique

URL = "/admin/kinetis_queue/scheduletick/"


def _client(*codenames: str, superuser: bool = False) -> Client:
    user = User.objects.create_user(f"u-{uuid.uuid4().hex[:12]}", password=None)
    user.is_staff, user.is_superuser = True, superuser
    user.save()
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="kinetis_queue", codename__in=codenames)
    )
    client = Client()
    client.force_login(User.objects.get(pk=user.pk))
    return client


def test_the_list_shows_each_schedule_with_its_last_job_id(queue_name: str) -> None:
    name = unique()
    entry = {"EVERY": 3600, "JOB": "tests.jobs.Records", "ARGS": {"label": "secret-label"}, "QUEUE": queue_name}
    hour = math.floor(time.time() / 3600) * 3600
    scheduler = Scheduler([build(name, **entry)])
    scheduler.fire_due(hour - 1000)
    scheduler.fire_due(hour + 1)

    with declared(**{name: entry}, broken={**entry, "CRON": "nope"}):
        page = _client("view_scheduletick").get(URL)
        denied = _client().get(URL)
        add = _client(superuser=True).get(URL + "add/")

    assert page.status_code == 200
    text = page.content.decode()
    assert name in text and tick_job_id(name, hour) in text and "every 3600s" in text
    assert "KINETIS_QUEUE[&#x27;SCHEDULE&#x27;][&#x27;broken&#x27;]" in text  # a bad declaration is said
    assert "secret-label" not in text  # arguments are never shown
    assert denied.status_code == 403
    assert add.status_code == 403
