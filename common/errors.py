"""Errors that know how to show themselves, and the exit codes of the CLI (DESIGN.md)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECKS_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: the reader of our output went away (`| head -1`)


class GpuforgeError(Exception):
    """Base of every error the CLI prints as `error: ...` without a traceback."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        text = f"error: {self.message}"
        if self.hint:
            text += f"\n  fix: {self.hint}"
        return text


class ConfigError(GpuforgeError):
    """Bad stack configuration: names the key, the bad value, and the fix."""

    def __init__(self, key: str, message: str, hint: str | None = None) -> None:
        super().__init__(f"{key}: {message}", hint)
        self.key = key


class InputError(GpuforgeError):
    """Bad input that is not stack config: a missing file, a malformed inventory, a bad flag."""
