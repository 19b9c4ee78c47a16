"""The package version, in its one place, and the user agent every request carries.

``pyproject.toml`` reads ``__version__`` from here (``[tool.setuptools.dynamic]``).
"""

from ._rules import USER_AGENT_PREFIX

__version__ = "0.1.0"

USER_AGENT = f"{USER_AGENT_PREFIX}python/{__version__}"
