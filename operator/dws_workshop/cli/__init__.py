"""The workshop's `dws-operator` subcommands: `dev`, `devcluster`, `emulator`."""
