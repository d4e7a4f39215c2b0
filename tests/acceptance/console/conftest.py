"""The console's fixtures (tests/integration/console/conftest.py) for its browser tests: the
broker process with its data (``scene``) and Debian's chromium driven by Playwright."""

from tests.integration.console.conftest import browser, scene  # noqa: F401 -- fixtures, by name
