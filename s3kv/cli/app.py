"""Parser assembly and the one place where errors become exit codes and one-line messages.

Under ``--json`` an error is also printed on stdout as a JSON document (``jsondoc.error``),
so a script reading stdout always gets JSON.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from s3kv import __version__
from s3kv.cli import cp, demo, gc, jsondoc, key, ls, pull, push, repair, rm, verify
from s3kv.cli.options import CHECKSUM_ALGORITHMS
from s3kv.cli.progress import Interrupted
from s3kv.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    IntegrityError,
    InvalidInputError,
    ManifestError,
    ManifestMissingError,
    NothingMatchedError,
    ObjectNotFoundError,
    S3KVError,
    StoreError,
    TransferError,
)

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_ACCESS = 4
EXIT_STORE = 5
EXIT_INTEGRITY = 6
EXIT_NO_MATCH = 7
EXIT_INTERRUPTED = 130

KINDS = {
    EXIT_FINDINGS: "failed",
    EXIT_USAGE: "usage",
    EXIT_NOT_FOUND: "not-found",
    EXIT_ACCESS: "access-denied",
    EXIT_STORE: "store",
    EXIT_INTEGRITY: "integrity",
    EXIT_NO_MATCH: "no-match",
    EXIT_INTERRUPTED: "interrupted",
}
"""The ``error.kind`` of ``--json`` error documents, by exit code."""

COMMANDS = [push, pull, cp, ls, verify, repair, gc, rm, demo, key]

EPILOG = """\
exit codes:
  0 success; 1 findings or failed blocks; 2 bad usage or input; 3 not found (bucket,
  object, file); 4 access denied; 5 store or network failure; 6 integrity error;
  7 nothing matched (a location with no namespace, a --namespace, --rank or --model that
  matches none); 130 interrupted (Ctrl-C or SIGTERM)

environment:
  AWS_ENDPOINT_URL, AWS_REGION, AWS_PROFILE, AWS_ACCESS_KEY_ID, ... as the AWS CLI;
  S3KV_ENDPOINT_URL, S3KV_CONCURRENCY, S3KV_CHECKSUM, ... override them for s3kv only.

Run 's3kv COMMAND --help' for a command's flags and examples.
"""


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (what, what was probably meant, where to look), exit 2;
    under ``--json`` also as a JSON error document on stdout."""

    argv: Sequence[str] = ()
    """The command line being parsed (set by :func:`parse`)."""
    commands: Mapping[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:
        hint = _suggest(message, self.argv, self.commands)
        command = _command_of(self.argv, self.commands)
        # argparse reports a subcommand's unknown flags from the top-level parser: name
        # the subcommand and its help all the same, where the flags are listed.
        prog = self.commands[command].prog if command and self.prog == "s3kv" else self.prog
        if "--json" in self.argv:
            jsondoc.emit(
                jsondoc.error(command or "s3kv", EXIT_USAGE, KINDS[EXIT_USAGE], message + hint)
            )
        self.exit(EXIT_USAGE, f"{prog}: error: {message}{hint} (see '{prog} --help')\n")


def _command_of(argv: Sequence[str], commands: Mapping[str, argparse.ArgumentParser]) -> str:
    """The subcommand named on the command line ("" if none): its first word that is not
    an option (the top-level parser takes no other positional)."""
    first = next((a for a in argv if not a.startswith("-")), "")
    return first if first in commands else ""


def _suggest(
    message: str, argv: Sequence[str], commands: Mapping[str, argparse.ArgumentParser]
) -> str:
    """'; did you mean --dry-run?' for an unknown flag or command close to a known one."""
    if message.startswith("unrecognized arguments:"):
        command = _command_of(argv, commands)
        if not command:
            return ""
        known = [o for a in commands[command]._actions for o in a.option_strings]
        for word in message.split(":", 1)[1].split():
            flag = word.split("=", 1)[0]
            if not flag.startswith("--"):
                continue
            squeezed = {o.replace("-", ""): o for o in known}
            same = squeezed.get(flag.replace("-", "").replace("_", ""))
            close = [same] if same else difflib.get_close_matches(flag, known, n=1)
            if close:
                return f"; did you mean {close[0]}?"
    if message.startswith("argument COMMAND: invalid choice:"):
        word = message.split("'")[1] if "'" in message else ""
        commands_close = difflib.get_close_matches(word, list(commands), n=1)
        if commands_close:
            return f"; did you mean '{commands_close[0]}'?"
    return ""


DISTRIBUTION = "s3kv-vllm"
"""The name to pip install: the index's `s3kv` is an unrelated project (pyproject.toml)."""
VERSION_LINE = f"s3kv {__version__} (pip install {DISTRIBUTION})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="s3kv",
        description="Keep vLLM KV-cache blocks in S3-compatible object storage.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=VERSION_LINE)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(sub)
    _Parser.commands = sub.choices
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse a command line; usage errors exit 2 with a suggestion where there is one."""
    _Parser.argv = list(argv)
    for i, word in enumerate(argv):
        # --checksum used to name the algorithm; it now compares blocks (as rclone's).
        value = word.partition("=")[2] if word.startswith("--checksum=") else None
        if word == "--checksum" and i + 1 < len(argv):
            value = argv[i + 1] if argv[i + 1] in CHECKSUM_ALGORITHMS else None
        if value is not None:
            parser.error(
                f"--checksum takes no value: it compares existing blocks by checksum; the "
                f"algorithm is set with --checksum-algorithm {value}"
            )
    return parser.parse_args(argv)


def exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, NothingMatchedError):
        return EXIT_NO_MATCH
    if isinstance(exc, InvalidInputError):
        return EXIT_USAGE
    if isinstance(exc, (ObjectNotFoundError, BucketNotFoundError, ManifestMissingError)):
        return EXIT_NOT_FOUND
    if isinstance(exc, AccessDeniedError):
        return EXIT_ACCESS
    if isinstance(exc, IntegrityError):
        return EXIT_INTEGRITY
    if isinstance(exc, (ManifestError, TransferError)):
        return EXIT_FINDINGS
    if isinstance(exc, StoreError):
        return EXIT_STORE
    return EXIT_FINDINGS


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    debug: bool = getattr(args, "debug", False)
    json_mode: bool = getattr(args, "json", False)
    handler: Any = args.handler
    try:
        return int(handler(args))
    except (Interrupted, KeyboardInterrupt) as exc:
        message = str(exc) or "s3kv: interrupted"
        _fail(args.command, EXIT_INTERRUPTED, message, json_mode, stderr=message)
        return EXIT_INTERRUPTED
    except S3KVError as exc:
        if debug:
            traceback.print_exc()
        code = exit_code_for(exc)
        suggestions = exc.suggestions if isinstance(exc, NothingMatchedError) else ()
        line = f"s3kv {args.command}: error: {exc}"
        _fail(args.command, code, str(exc), json_mode, stderr=line, suggestions=suggestions)
        return code
    except BrokenPipeError:  # `s3kv ls | head`
        return EXIT_OK


def _fail(
    command: str,
    code: int,
    message: str,
    json_mode: bool,
    *,
    stderr: str,
    suggestions: Sequence[str] = (),
) -> None:
    if json_mode:
        jsondoc.emit(jsondoc.error(command, code, KINDS[code], message, suggestions))
    print(stderr, file=sys.stderr)
