"""What the tests share: servers they start, platform harnesses, clients and waits."""
