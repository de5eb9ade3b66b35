"""Parser assembly and the one place where errors become exit codes and one-line messages."""

from __future__ import annotations

import argparse
import sys
import traceback
from typing import Any, NoReturn

from s3kv import __version__
from s3kv.cli import cp, demo, gc, key, ls, pull, push, verify
from s3kv.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    IntegrityError,
    InvalidInputError,
    ManifestError,
    ManifestMissingError,
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
EXIT_INTERRUPTED = 130

COMMANDS = [push, pull, cp, ls, verify, gc, demo, key]

EPILOG = """\
exit codes:
  0 success; 1 findings or failed blocks; 2 bad usage or input; 3 not found;
  4 access denied; 5 store or network failure; 6 integrity error; 130 interrupted

environment:
  AWS_ENDPOINT_URL, AWS_REGION, AWS_PROFILE, AWS_ACCESS_KEY_ID, ... as the AWS CLI;
  S3KV_ENDPOINT_URL, S3KV_CONCURRENCY, S3KV_CHECKSUM, ... override them for s3kv only.

Run 's3kv COMMAND --help' for a command's flags and examples.
"""


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (what, and where to look), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


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
    return parser


def exit_code_for(exc: BaseException) -> int:
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
    handler: Any = args.handler
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        print("s3kv: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except S3KVError as exc:
        if debug:
            traceback.print_exc()
        print(f"s3kv {args.command}: error: {exc}", file=sys.stderr)
        return exit_code_for(exc)
    except BrokenPipeError:  # `s3kv ls | head`
        return EXIT_OK
