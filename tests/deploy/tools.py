"""Finding the system tools the deploy tests drive (kubectl, systemd-analyze, podman): a missing
one skips the test with the package to install, except under ``CI=true`` for the tools CI
installs (``.ci/system-deps``), where it fails: CI must never pass by skipping."""

from __future__ import annotations

import os
import shutil

import pytest


def require(tool: str, package: str, *, in_ci: bool) -> str:
    """The path of ``tool``; skips (fails under ``CI=true`` when ``in_ci``) when it is missing."""
    path = shutil.which(tool)
    if path is None:
        message = f"{tool} is not installed (Debian package {package}; `make system-deps` installs the CI ones)"
        if in_ci and os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
