"""Platforms that live only in the tests: each folder is one platform, its adapter, its fake and
its harness (docs/extending.md)."""
