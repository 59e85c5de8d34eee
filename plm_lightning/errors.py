"""The one exception type the CLI turns into a one-line message and exit code 2, the argument parser of our
subcommands that raises it, and the line a failed subprocess of ours (a sweep trial, an arena run) is reported by."""

import argparse


class ConfigError(ValueError):
    """Bad user input: a config key, a data file, a tokenizer or a checkpoint. The message names it and says what
    would be valid."""


class _DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, unless there is none to show (a required option, a default of None)
    or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.required or action.default is None or "default:" in text or "(default" in text:
            return text
        return super()._get_help_string(action)


class CommandParser(argparse.ArgumentParser):
    """argparse for the CLI's extra subcommands: a usage error is a one-line ``ConfigError`` (exit 2); ``--help``
    shows each option's default."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:
        raise ConfigError(f"{self.prog}: {message}")


def last_line(text: str) -> str:
    """The last non-empty line of a subprocess's output: the one-line error of our CLI."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"
