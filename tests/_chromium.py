"""A real headless Chromium for the tests of deskctl's web pages (Debian's ``chromium`` + ``chromium-driver``).

Driven through Selenium with the system chromedriver named explicitly, so nothing is ever downloaded. The flags
keep Chromium off the network (this machine has none) and away from a shared profile.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture
def chromium() -> Iterator[Any]:
    """A Selenium WebDriver of a headless Chromium with its own empty profile; quit afterwards."""
    if shutil.which(CHROMIUM) is None or shutil.which(CHROMEDRIVER) is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (scripts/setup --dev installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="deskctl-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
