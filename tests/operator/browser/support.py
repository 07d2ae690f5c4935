"""What the browser tests share: Debian's headless Chromium driven through Debian's chromedriver, and a
Session (the browser logged in as one user, or nobody) with its screenshots under reports/browser/.

Chromium and its driver are Debian's (``chromium``, ``chromium-driver``; scripts/system-deps.sh installs
them); Selenium is pointed at /usr/bin/chromedriver and runs offline, so nothing is downloaded. The
fixtures (the live server, the browser) are in conftest.py.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra: pip install -e '.[dev]'")
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS = Path(__file__).resolve().parents[3] / "reports" / "browser"
WIDTH, HEIGHT = 1280, 900


def start_chromium(*, javascript: bool = True) -> Any:
    """A headless Chromium (with JavaScript switched off when asked); fails loudly when the Debian packages
    are missing."""
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
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return driver


class Session:
    """The browser logged in as one user (or nobody) against the live server."""

    def __init__(self, driver: Any, base: str, role: str) -> None:
        self.driver, self.base, self.role = driver, base, role
        driver.delete_all_cookies()
        if role != "anonymous":
            client = Client()
            client.force_login(user(role))
            driver.get(base + "/static/admin/css/base.css")  # a page on the domain, to set its cookie
            driver.add_cookie({"name": "sessionid", "value": client.cookies["sessionid"].value, "path": "/"})

    def get(self, url: str) -> str:
        self.driver.get(self.base + url)
        return str(self.driver.page_source)

    def shot(self, page: str, *, whole: bool = False, name: str | None = None) -> None:
        """A screenshot of the window, or (``whole``) of the whole page in a window as tall as it; saved as
        ``<page>-<role>.png``, or ``<name>.png``."""
        target = str(SCREENSHOTS / f"{name or f'{page}-{self.role}'}.png")
        if not whole:
            self.driver.save_screenshot(target)
            return
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(WIDTH, max(HEIGHT, min(int(height) + 150, 4000)))
        try:
            self.driver.save_screenshot(target)
        finally:
            self.driver.set_window_size(WIDTH, HEIGHT)

    def follow(self, css: str) -> None:
        """Click what ``css`` finds and wait until the page it leads to has loaded."""
        page = self.find("html")
        for attempt in range(3):  # a page that replaces its parts (the dashboard's refresh) may swap it meanwhile
            try:
                self.find(css).click()
                break
            except StaleElementReferenceException:
                if attempt == 2:
                    raise
        wait = WebDriverWait(self.driver, 30)
        wait.until(expected_conditions.staleness_of(page))
        wait.until(lambda driver: driver.execute_script("return document.readyState") == "complete")

    def text(self, css: str) -> str:
        """The text of what ``css`` finds, read in one script: no stale element even while the page swaps
        that part (the dashboard's refresh); "" when nothing matches."""
        script = "const e = document.querySelector(arguments[0]); return e === null ? '' : e.innerText"
        return str(self.driver.execute_script(script, css))

    def texts(self, css: str) -> list[str]:
        """The texts of everything ``css`` finds, read in one script (see text())."""
        script = "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim())"
        return [str(text) for text in self.driver.execute_script(script, css)]

    def count(self, css: str) -> int:
        return int(self.driver.execute_script("return document.querySelectorAll(arguments[0]).length", css))

    def find(self, css: str) -> Any:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def has(self, css: str) -> bool:
        try:
            self.find(css)
        except NoSuchElementException:
            return False
        return True


def user(role: str) -> User:
    """A staff user: a superuser, or (``view_only``) one who may view the failed jobs and the chains and
    batches, and do nothing else."""
    made = User.objects.create_user(
        f"b-{role}-{uuid.uuid4().hex[:12]}", password=None, is_staff=True, is_superuser=role == "superuser"
    )
    if role == "view_only":
        made.user_permissions.set(Permission.objects.filter(codename__in=["view_failedjob", "view_workflow"]))
    return made


#: What the test modules take from Selenium through this module (so that a missing selenium skips them).
__all__ = ["By", "Select", "Session", "WebDriverWait", "expected_conditions", "start_chromium", "user"]
