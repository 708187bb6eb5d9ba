"""One module per `gpuforge` subcommand; each exposes a click command named `command`."""
