"""``s3kv gc LOCATION --break-lease``: remove the lease of a gc that died, after asking."""

from __future__ import annotations

import argparse
import sys

from s3kv.cli.options import settings_from_args, tenant_locations
from s3kv.errors import InvalidInputError
from s3kv.ops.gc.lease import LeaseInfo, break_lease

PROMPT = "Remove it? A gc still running on it stops before its next delete batch. [y/N] "


def break_lease_command(args: argparse.Namespace) -> int:
    """Show the lease, ask (unless ``--yes``), remove it: exit 0 when none is left."""
    if args.older_than is not None or args.max_bytes is not None or args.dry_run:
        raise InvalidInputError(
            "--break-lease only removes the lease; run gc again without it afterwards"
        )
    if args.json:
        raise InvalidInputError("--break-lease asks and answers in text: run it without --json")

    def confirm(held: LeaseInfo) -> bool:
        print(f"gc lease: {held.describe()}")
        if args.yes:
            return True
        if not sys.stdin.isatty():
            raise InvalidInputError(
                "--break-lease asks before it removes a lease, and stdin is no terminal: "
                "add --yes to remove it"
            )
        return input(PROMPT).strip().lower() in ("y", "yes")

    (location,) = tenant_locations(args, args.location)
    held, broken = break_lease(location, settings=settings_from_args(args), confirm=confirm)
    if held is None:
        print(f"no gc lease at {location}: nothing to break")
        return 0
    if broken:
        print(f"removed the gc lease held by {held.holder}; run gc again")
        return 0
    print("left the lease in place" if not args.yes else "the lease changed meanwhile: left it")
    return 1
