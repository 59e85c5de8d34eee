"""A zygote for ``conftest.run_cli``: a process that has imported the CLI once and forks a child per request, so
that each ``python -m plm_lightning ARGS`` of the tests starts without a new interpreter's ~10 s of imports. It never
runs a parallel region itself, so forking it is safe for the intra-op thread pool.

Protocol (one JSON object per line): the parent writes ``{"args", "cwd", "env", "stdout", "stderr"}``; the zygote
answers ``{"pid": N}`` when the child starts and ``{"code": STATUS}`` when it ends."""

import json
import os
import sys

import plm_lightning.cli  # noqa: F401 - what a new interpreter would spend its seconds on
import plm_lightning.commands  # noqa: F401
import plm_lightning.recipe_cli  # noqa: F401


def become_cli(args: list[str], cwd: str, env: dict[str, str], stdout: str, stderr: str) -> int:
    """Become ``python -m plm_lightning ARGS`` run in ``cwd`` with ``env``: its environment, command line, standard
    streams (at the file-descriptor level, so subprocesses and C code write there too) and exit status; at-exit
    handlers run as at an interpreter's exit."""
    import atexit
    import warnings

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if "ignore" in env.get("PYTHONWARNINGS", ""):
        warnings.simplefilter("ignore")
    for name, fd in ((stdout, 1), (stderr, 2)):
        handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(handle, fd)
        os.close(handle)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the zygote's requests are not the child's input
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.argv = [os.path.join(os.path.dirname(plm_lightning.cli.__file__), "__main__.py"), *args]
    code = 0
    try:
        plm_lightning.cli.main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int | None):
            print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - an uncaught error: the traceback an interpreter prints, status 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
    return code


def serve() -> None:
    requests, replies = sys.stdin, sys.stdout
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os._exit(become_cli(**request))
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        replies.write(json.dumps({"code": code}) + "\n")
        replies.flush()


if __name__ == "__main__":
    serve()
