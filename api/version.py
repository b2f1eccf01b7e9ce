"""The version of this installation, from the distribution's metadata.

``[project] version`` in ``pyproject.toml`` is the only place the number is written. Everything
that states a version (``mcp-reconciler --version``, the MCP ``serverInfo`` of the front door,
the OpenAPI document's ``info.version``) reads it from here, so an editable install, a wheel and
the committed ``api/openapi.json`` (checked by ``tests/api/test_openapi.py``) cannot disagree."""

from __future__ import annotations

from importlib.metadata import version as _distribution_version
from typing import Final

#: The distribution name on PyPI and in ``pip show``.
DISTRIBUTION: Final = "mcp-reconciler"

#: The installed version (PEP 440), read once at import. The import names ``mcp_reconciler.*``
#: exist only through an installed distribution (editable or wheel), so its metadata is present.
__version__: Final[str] = _distribution_version(DISTRIBUTION)
