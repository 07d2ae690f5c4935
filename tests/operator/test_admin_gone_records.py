"""Admin retry and forget for a record that is gone (another operator forgot it): a warning, back to the list."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from kinetis_queue.models import FailedJob
from tests.operator.test_admin import client_for

GONE = 2_000_000_000


@pytest.mark.parametrize(("view", "method"), [("retry", "post"), ("forget", "get"), ("forget", "post")])
def test_a_record_that_is_gone_is_said_so_and_leads_back_to_the_list(view: str, method: str) -> None:
    assert not FailedJob.objects.filter(pk=GONE).exists()
    client = client_for("full")
    url = reverse(f"admin:kinetis_queue_failedjob_{view}", args=[GONE])
    response = getattr(client, method)(url, {"post": "yes"} if method == "post" else {})
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:kinetis_queue_failedjob_changelist")
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert shown == [f"There is no failed job with id {GONE}."]
