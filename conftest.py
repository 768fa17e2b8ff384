"""Loaded for every pytest run from the project root: plugins shared by tests/ and compat_tests/."""

pytest_plugins = ["tests.skip_summary", "tests.client_leaks", "tests.run_tiers"]
