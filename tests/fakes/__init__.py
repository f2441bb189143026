"""Stand-ins for what the operator talks to, held to the real thing by contract tests."""
