"""The suite's fixtures and hooks live in one plugin, tests/support/plugin.py; the helpers
tests import are the modules of tests/support/."""

pytest_plugins = ["tests.support.plugin"]
