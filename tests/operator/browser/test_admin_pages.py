"""The failed-jobs admin in headless Chromium: every page as superuser, view-only staff and anonymous,
each operation clicked through, the list's fit in a 1280 px window. Screenshots go to reports/browser/.

Chromium and its driver are Debian's (``chromium``, ``chromium-driver``; scripts/system-deps.sh installs
them); Selenium is pointed at /usr/bin/chromedriver and runs offline, so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.test import Client, override_settings
from django.test.testcases import LiveServerThread
from django.urls import reverse

from kinetis_queue import queues
from kinetis_queue.models import FailedJob
from tests.operator.test_admin import SECRET, STATUS_SETTINGS

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra: pip install -e '.[dev]'")
from selenium.common.exceptions import NoSuchElementException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS = Path(__file__).resolve().parents[3] / "reports" / "browser"
WIDTH, HEIGHT = 1280, 900
#: Names as long as real projects have them: the list must still show the failure time.
LONG_TASK = "acme_billing.tasks.invoicing.reconcile_outstanding_customer_invoices_for_accounting_period"
LONG_EXCEPTION = "acme_billing.gateways.exceptions.PaymentGatewayTemporarilyUnavailableError"


@pytest.fixture(scope="module")
def live_url(django_db_setup: None) -> Iterator[str]:
    """Django's live server (with the static files handler) on a free port, for this module."""
    thread = LiveServerThread("127.0.0.1", StaticFilesHandler)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error is not None:
        raise thread.error
    settings = override_settings(ALLOWED_HOSTS=["127.0.0.1", "testserver"], KINETIS_QUEUE=STATUS_SETTINGS)
    settings.enable()
    try:
        yield f"http://127.0.0.1:{thread.port}"
    finally:
        settings.disable()
        thread.terminate()
        thread.join()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module; fails loudly when the Debian packages are missing."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (os.access(path, os.X_OK) or shutil.which(Path(path).name)):
            pytest.fail(
                f"{path} is missing: install the Debian package {package} "
                f"(bash scripts/system-deps.sh, or apt-get install {package})",
                pytrace=False,
            )
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never download a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WIDTH},{HEIGHT}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


class Session:
    """The browser logged in as one user (or nobody) against the live server."""

    def __init__(self, driver: Any, base: str, role: str) -> None:
        self.driver, self.base, self.role = driver, base, role
        driver.delete_all_cookies()
        if role != "anonymous":
            client = Client()
            client.force_login(_user(role))
            driver.get(base + "/static/admin/css/base.css")  # a page on the domain, to set its cookie
            driver.add_cookie({"name": "sessionid", "value": client.cookies["sessionid"].value, "path": "/"})

    def get(self, url: str) -> str:
        self.driver.get(self.base + url)
        return str(self.driver.page_source)

    def shot(self, page: str) -> None:
        self.driver.save_screenshot(str(SCREENSHOTS / f"{page}-{self.role}.png"))

    def follow(self, css: str) -> None:
        """Click what ``css`` finds and wait until the page it leads to has loaded."""
        page = self.find("html")
        self.find(css).click()
        wait = WebDriverWait(self.driver, 30)
        wait.until(expected_conditions.staleness_of(page))
        wait.until(lambda driver: driver.execute_script("return document.readyState") == "complete")

    def find(self, css: str) -> Any:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def has(self, css: str) -> bool:
        try:
            self.find(css)
        except NoSuchElementException:
            return False
        return True


def _user(role: str) -> User:
    user = User.objects.create_user(
        f"b-{role}-{uuid.uuid4().hex[:12]}", password=None, is_staff=True, is_superuser=role == "superuser"
    )
    if role == "view_only":
        user.user_permissions.set(Permission.objects.filter(codename="view_failedjob"))
    return user


def _record(queue_name: str, **fields: Any) -> FailedJob:
    values: dict[str, Any] = {
        "queue": queue_name,
        "job_id": uuid.uuid4().hex,
        "job_class": "tests.jobs.Fails",
        "args": json.dumps({"label": "visible-label", "token": SECRET}),
        "attempts": 3,
        "max_attempts": 3,
        "exception_class": "builtins.RuntimeError",
        "exception_message": "deliberate failure",
        "traceback": "Traceback (most recent call last):\nRuntimeError: deliberate failure",
    }
    return FailedJob.objects.create(**{**values, **fields})


def _changelist(queue_name: str) -> str:
    return reverse("admin:kinetis_queue_failedjob_changelist") + f"?queue={queue_name}"


@pytest.mark.parametrize("role", ["superuser", "view_only", "anonymous"])
def test_each_page_for_each_user(role: str, browser: Any, live_url: str, queue_name: str) -> None:
    record = _record(queue_name)
    session = Session(browser, live_url, role)
    pages = {
        "list": _changelist(queue_name),
        "detail": reverse("admin:kinetis_queue_failedjob_change", args=[record.pk]),
        "status": reverse("admin:kinetis_queue_failedjob_status"),
    }
    for page, url in pages.items():
        body = session.get(url)
        session.shot(page)
        assert SECRET not in body
        if role == "anonymous":
            assert session.has("#login-form"), page
            continue
        # The admin's CSS arrived (static files served) and styles the breadcrumbs' markup.
        crumbs = session.find(".breadcrumbs")
        assert crumbs.value_of_css_property("background-color") == "rgba(38, 75, 93, 1)", page
        assert "Failed jobs" in crumbs.text
    if role == "anonymous":
        return
    session.get(pages["detail"])
    assert "visible-label" in session.find(".field-arguments").text
    assert "[redacted]" in session.find(".field-arguments").text
    assert session.has("#retry-form") is (role == "superuser")
    assert session.has("#forget-link") is (role == "superuser")
    session.get(pages["list"])
    assert session.has("select[name=action]") is (role == "superuser")


def test_the_list_fits_1280_pixels_with_the_failure_time_in_view(browser: Any, live_url: str, queue_name: str) -> None:
    import kinetis_queue.contrib.receivers  # noqa: F401  (registers the carrier, so the list names the receiver)

    for _ in range(3):
        _record(
            queue_name,
            job_class="kinetis_queue.contrib.receivers.QueuedReceiverJob",
            args=json.dumps({"receiver": LONG_TASK, "sender": None, "kwargs": {"token": SECRET}}),
            exception_class=LONG_EXCEPTION,
            connection="a-rather-long-connection-name",
        )
    session = Session(browser, live_url, "superuser")
    browser.set_window_size(WIDTH, HEIGHT)
    session.get(_changelist(queue_name))
    session.shot("list-1280")
    width = browser.execute_script("return window.innerWidth")
    cells = browser.find_elements(
        By.CSS_SELECTOR, "#result_list .column-failed_at_shown, #result_list .field-failed_at_shown"
    )
    assert len(cells) == 4  # the header and three rows
    for cell in cells:
        rect = cell.rect
        assert cell.is_displayed() and rect["x"] >= 0 and rect["x"] + rect["width"] <= width, rect
    # Nothing of the table is hidden behind a horizontal scroll either.
    assert browser.execute_script(
        "const r = document.querySelector('#changelist .results');return r.scrollWidth <= r.clientWidth"
    )
    assert LONG_TASK.rpartition(".")[2] in session.find("#result_list").text


def test_bulk_retry_and_forget(browser: Any, live_url: str, queue_name: str) -> None:
    first, second = _record(queue_name), _record(queue_name)
    session = Session(browser, live_url, "superuser")

    def run(action: str, record: FailedJob) -> None:
        session.get(_changelist(queue_name))
        session.find(f"input[name=_selected_action][value='{record.pk}']").click()
        Select(session.find("select[name=action]")).select_by_value(action)
        session.follow("button[name=index]")

    run("retry_selected", first)
    assert "1 failed job(s) pushed again." in session.find(".messagelist").text
    session.shot("bulk-retry-done")
    assert not FailedJob.objects.filter(pk=first.pk).exists()
    job = queues["sqlite"].pop(5, [queue_name])
    assert job is not None and job.args["token"] == SECRET
    queues["sqlite"].ack(job)

    run("forget_selected", second)
    assert "Are you sure you want to forget the selected failed jobs?" in session.find("#content").text
    session.shot("bulk-forget-confirmation")
    assert FailedJob.objects.filter(pk=second.pk).exists()
    session.follow("input[type=submit][value='Yes, forget']")
    assert "1 failed job(s) forgotten." in session.find(".messagelist").text
    assert not FailedJob.objects.filter(pk=second.pk).exists()


def test_detail_page_retry_and_forget(browser: Any, live_url: str, queue_name: str) -> None:
    first, second = _record(queue_name), _record(queue_name)
    session = Session(browser, live_url, "superuser")

    session.get(reverse("admin:kinetis_queue_failedjob_change", args=[first.pk]))
    browser.execute_script("arguments[0].scrollIntoView()", session.find(".failedjob-operations"))
    session.shot("detail-operations")
    session.follow("#retry-form input[type=submit]")
    assert f"Failed job {first.pk} pushed again." in session.find(".messagelist").text
    assert not FailedJob.objects.filter(pk=first.pk).exists()
    job = queues["sqlite"].pop(5, [queue_name])
    assert job is not None
    queues["sqlite"].ack(job)

    session.get(reverse("admin:kinetis_queue_failedjob_change", args=[second.pk]))
    session.follow("#forget-link")
    assert "Are you sure you want to forget this failed job?" in session.find("#content").text
    session.shot("detail-forget-confirmation")
    session.follow("a.cancel-link")  # "No, take me back": the record is untouched
    assert session.has("#forget-link") and FailedJob.objects.filter(pk=second.pk).exists()
    session.follow("#forget-link")
    session.follow("input[type=submit][value='Yes, forget']")
    assert f"Failed job {second.pk} forgotten." in session.find(".messagelist").text
    assert not FailedJob.objects.filter(pk=second.pk).exists()
