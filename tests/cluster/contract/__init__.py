"""Contract tests: the same assertions against the tests' fakes and the real thing."""
