"""The one exception type the CLI turns into a one-line message and exit code 2."""


class ConfigError(ValueError):
    """Bad user input: a config key, a data file, a tokenizer or a checkpoint. The message names it and says what
    would be valid."""
