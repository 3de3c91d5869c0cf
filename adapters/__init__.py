"""Platform adapters: one subpackage each, with the same module names for the same jobs."""
