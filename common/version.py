"""gpuforge's version: the one place it is written (pyproject.toml reads it for the build, `gpuforge
--version` prints it, and the node bootstrap installs this version of the wheel on every node)."""

__version__ = "0.1.0"
