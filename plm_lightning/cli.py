"""``python -m plm_lightning``: LightningCLI (fit/validate/test/predict; ``recipe_cli.PLMCLI``) plus inspect, export,
import and the knowledge tools (world, probe, causal-trace, edit).

Errors in user input print one line on stderr and exit with code 2; ``PLM_DEBUG=1`` shows the traceback. This module
imports Lightning only when a command needs it: a tool that trains nothing (``export``, ``import``, ...) starts
without it.
"""

from __future__ import annotations

import logging
import os
import sys

from plm_lightning.command_index import EXTRA_COMMANDS, answer_without_lightning
from plm_lightning.errors import ConfigError
from plm_lightning.files import os_error_line


def _fail(message: str) -> None:
    first = " ".join(str(message).strip().split("\n")[0].split())
    print(f"plm_lightning: error: {first}", file=sys.stderr)
    raise SystemExit(2)


def _explain_parse_error(err: Exception) -> str:
    """Turn a jsonargparse error into one line naming the key and the valid alternatives."""
    import re

    text = " ".join(str(err).split())
    section = re.search(r'Parser key "([\w.]+)"', text)
    option = re.search(r"Option '([\w.]+)' is not accepted", text) or re.search(r'No action for key "([\w.]+)"', text)
    if option:
        key = f"{section.group(1)}.{option.group(1)}" if section else option.group(1)
        top = key.split(".")[0]
        given = re.search(r"given class_path '([\w.]+)'", text)  # the recipe's class: its keys, not every class's
        valid = _valid_keys(top, given.group(1).rsplit(".", 1)[-1] if given else None)
        if valid:
            return f"unknown key '{key}'; valid keys under '{top}': {', '.join(valid)}"
        return f"unknown key '{key}'"
    typed = re.search(r'Parser key "([\w.]+)": Expected a (.+?)\. Got value: (\S+)', text)
    if typed:
        key = f"{section.group(1)}.{typed.group(1)}" if section and section.group(1) != typed.group(1) else typed.group(1)
        expected, got = typed.group(2), typed.group(3)
        choices = re.fullmatch(r"typing\.Literal\[(.*)\]", expected)
        if choices:
            return f"{key}={got!r} is not one of {choices.group(1)}"
        expected = re.sub(r"<class '([\w.]+)'>", r"\1", expected)
        return f"{key}={got!r} is not a valid {expected}"
    return text


def _valid_keys(section: str, class_name: str | None = None) -> list[str]:
    """The constructor keys under ``section``: of the class named ``class_name`` when it is one of ours, else of every
    class that section may name (a name is matched, never imported)."""
    import inspect as pyinspect

    from plm_lightning.registry import lightning_classes

    classes: dict[str, list[type]] = {"model": lightning_classes("model"), "data": lightning_classes("data")}
    if section.split(".")[0] == "trainer":
        import lightning as L

        classes["trainer"] = [L.Trainer]
    names: list[str] = []
    candidates = classes.get(section.split(".")[0], [])
    named = [cls for cls in candidates if cls.__name__ == class_name]
    for cls in named or candidates:
        for klass in cls.__mro__:
            if "__init__" in vars(klass):
                for p in pyinspect.signature(klass.__init__).parameters.values():
                    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self" and p.name not in names:
                        names.append(p.name)
    return names


class _NoAdvertisement(logging.Filter):
    """Drops Lightning's "try installing litlogger" tip, printed at the start of every run of the CLI, and its note
    that the trainer already has a model summary callback (ours, ``plm_lightning.callbacks.ModelSummary``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return "litlogger" not in message and "already configured with model summary" not in message


_NO_ADVERTISEMENT = _NoAdvertisement()


def show_our_log() -> None:
    """Our modules' INFO messages (which attention kernel runs, once) on stderr as ``plm_lightning: ...`` lines."""
    ours = logging.getLogger("plm_lightning")
    if not ours.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("plm_lightning: %(message)s"))
        ours.addHandler(handler)
        ours.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> None:
    for name in ("lightning.fabric.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_NO_ADVERTISEMENT)
    show_our_log()
    from_sys = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    answered = answer_without_lightning(argv)
    if answered is not None:
        sys.exit(answered)
    try:
        generating = argv[:1] == ["predict"] and len(argv) > 1 and (not argv[1].startswith("-")
                                                                    or argv[1:] in (["-h"], ["--help"]))
        if argv and (argv[0] in EXTRA_COMMANDS or generating):  # `predict --config ...` stays LightningCLI's
            from plm_lightning import commands

            getattr(commands, f"run_{argv[0].replace('-', '_')}")(argv[1:])
        else:
            from plm_lightning.recipe_cli import PLMCLI, check_config_files

            check_config_files(argv)
            PLMCLI(args=None if from_sys else argv)
    except SystemExit:
        raise
    except BrokenPipeError:  # `inspect ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except Exception as err:  # noqa: BLE001 - the CLI's one-line error contract
        if os.environ.get("PLM_DEBUG"):
            raise
        user_error = _find_user_error(err)
        if user_error is not None:
            _fail(_explain_parse_error(user_error) if _is_parse_error(user_error) else str(user_error))
        line = os_error_line(err) if isinstance(err, OSError) else None
        if line is not None:
            _fail(line)
        raise


def _is_parse_error(err: BaseException) -> bool:
    parsing = sys.modules.get("jsonargparse")  # none if no LightningCLI parsed anything
    return parsing is not None and isinstance(err, parsing.ArgumentError)


def _find_user_error(err: BaseException) -> BaseException | None:
    """The ConfigError / parse error / missing file / Lightning misconfiguration (``trainer.enable_progress_bar=false``
    with a progress-bar callback, ...) behind ``err`` (possibly wrapped by Lightning or jsonargparse)."""
    lightning_errors = sys.modules.get("lightning.fabric.utilities.exceptions")  # none if Lightning never ran
    user_errors = (ConfigError, FileNotFoundError,
                   *((lightning_errors.MisconfigurationException,) if lightning_errors else ()))
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        if isinstance(e, user_errors) or _is_parse_error(e):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None
