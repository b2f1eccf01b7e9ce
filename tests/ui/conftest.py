"""Browser tests of the operator console: Debian's ``chromium`` driven by ``chromedriver``
through selenium (a test dependency only). Browsers cannot be downloaded here, so the binaries
come from the system (``apt-get install chromium chromium-driver``; ``.ci/run`` installs them).
Without them the tests skip — except under ``CI=true``, where a missing browser fails."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser_binaries() -> tuple[str, str]:
    """Paths of chromium and chromedriver; skip (fail under CI=true) when either is missing."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        missing = "chromium" if CHROMIUM is None else "chromedriver"
        message = f"{missing} is not installed (apt-get install chromium chromium-driver)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: the console's browser test must run, but {message}")
        pytest.skip(message)
    return CHROMIUM, CHROMEDRIVER
