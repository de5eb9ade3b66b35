"""The ``s3kv`` command line: a thin layer over the library.

Exit codes (also in ``s3kv --help``):

* 0  success
* 1  the command ran and found problems (verify findings, blocks that failed to transfer,
     an unreadable manifest, keys refused as stray, blocks rm found stored meanwhile)
* 2  bad usage or invalid input (flags, locations, namespaces, keys)
* 3  not found (bucket, object, manifest file)
* 4  access denied
* 5  the store failed (network, throttling past the retry deadline, server errors)
* 6  integrity error (checksum or size mismatch)
* 7  nothing matched: a location with no namespace (``--allow-empty`` accepts an existing
     empty one), a ``--namespace``, ``--rank`` or ``--model`` that matches none
* 130 interrupted (Ctrl-C, or SIGTERM as systemd and Kubernetes stop a process); the
     message says what was done and how to resume
"""

from __future__ import annotations

import gc as _collector  # not `gc`: s3kv.cli.gc is the gc command
import io
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from s3kv.cli.app import build_parser, parse, run


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``s3kv`` console script."""
    for stream in (sys.stdout, sys.stderr):
        # argv and directory names may hold bytes that are not UTF-8 (as surrogates):
        # print them back as they came rather than fail in the middle of a report.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(
                errors="surrogateescape" if stream is sys.stdout else "backslashreplace"
            )
    parser = build_parser()
    args = parse(parser, sys.argv[1:] if argv is None else list(argv))
    if threading.current_thread() is not threading.main_thread():
        return run(parser, args)
    # A stop (systemd, Kubernetes, kill) ends a command as Ctrl-C does: blocks in flight
    # finish or are removed, nothing half-written stays, and the message says how to resume.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return run(parser, args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def console() -> NoReturn:
    """The ``s3kv`` console script (and ``python -m s3kv.cli``): :func:`main` in a
    process of its own, started and ended as a short command should be.

    Python's cyclic collector runs less often: otherwise it walks the growing heap
    again and again while botocore, boto3 and pydantic import, tens of milliseconds of
    every command (a one-block pull: bench/evidence/cli-start.json). And once the
    command's output is flushed and no other thread runs, the process ends without the
    interpreter tearing every module down one by one (tens of milliseconds more); if a
    stream cannot be flushed (``s3kv ls | head``) or a thread still runs, it ends as any
    Python program does.
    """
    _collector.set_threshold(50_000, 50, 1000)
    code = main()
    logging.shutdown()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (`s3kv ls | head`): the rest has nowhere to go
        _discard_stdout()
    except (OSError, ValueError):
        sys.exit(code)
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and t.is_alive() and not t.daemon]
    if others:
        sys.exit(code)
    os._exit(code)


def _discard_stdout() -> None:
    """Point standard output at /dev/null, so that no later flush (the interpreter's own,
    at its end) fails on the closed pipe too, and the process ends with the command's code
    rather than Python's 120 and an "Exception ignored" on stderr."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
