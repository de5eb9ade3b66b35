"""``s3kv rm``: forget namespaces (a model, a vLLM release): every rank's blocks, then the
manifest; first what would go, then a prompt (``--yes`` skips it)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from s3kv.cli import jsondoc
from s3kv.cli.options import add_common, add_connection, settings_from_args, tenant_locations
from s3kv.cli.progress import Interrupted, summary, watching
from s3kv.errors import InvalidInputError, S3KVError, plural
from s3kv.units import format_bytes

if TYPE_CHECKING:
    from s3kv.ops.remove import RemoveReport

EXAMPLES = """\
examples:
  # after an upgrade: see what the old model's namespaces hold, then remove them
  s3kv rm s3://my-bucket/kv --model meta-llama/Llama-3.1-8B-Instruct --dry-run
  s3kv rm s3://my-bucket/kv --model meta-llama/Llama-3.1-8B-Instruct --yes

  # one namespace, by digest (or folder), in a node's disk cache
  s3kv rm /mnt/kv --namespace 330cb72a4d52 --yes --json

  # forget one tenant: every namespace under s3://my-bucket/kv/tenants/acme (its manifests
  # are read with its key: give the secret its objects were written with)
  s3kv rm s3://my-bucket/kv --tenant acme --sse-c-secret-file /mnt/secrets/s3kv-sse-c --yes

Without --yes, rm lists what would go (namespaces, blocks, bytes), then asks on the
terminal; with no terminal to ask (cron, CI) it stops, exit 2. Every rank's blocks go
first, then the manifest. Other namespaces are never listed or touched, so tiers may
keep writing them. A writer still storing into a namespace being removed keeps what it
stores after rm listed it (those blocks and their manifest stay, exit 1): stop the old
deployment first. One rm or gc at a time per location. Exit codes: 0 removed; 1 blocks
left or failures (run again), or the prompt declined; 2 usage; 7 no namespace matched.
"""
RESUME = "Deleted blocks stay deleted; run the same command again to finish."


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "rm",
        help="remove namespaces (a model, a vLLM release): every rank's blocks, then the "
        "manifest",
        description="Remove one or more namespaces at LOCATION, chosen by folder or digest "
        "(--namespace) or by model (--model): every rank's blocks, in batches of up to 1,000 "
        "keys per request, then the manifest. What would go is shown first.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("location", metavar="LOCATION", help="s3://bucket[/prefix] or a directory")
    parser.add_argument(
        "--namespace", action="append", default=[], metavar="FOLDER|DIGEST",
        help="a namespace's folder or 12-hex digest; repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--model", action="append", default=[], metavar="NAME",
        help="every namespace of this model (org/name, as vLLM names it); repeatable",
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="show what would go; delete nothing")
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask; remove at once")
    add_connection(parser, concurrency=False)  # one delete request at a time
    add_common(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from s3kv.ops.remove import remove

    (location,) = tenant_locations(args, args.location)
    everything = location != args.location and not args.namespace and not args.model
    if not args.namespace and not args.model and not everything:
        raise InvalidInputError(
            "rm needs --namespace FOLDER|DIGEST, --model NAME or --tenant NAME (it never "
            "removes a whole location; 's3kv ls' shows what one holds)"
        )
    settings = settings_from_args(args)
    namespaces, models = tuple(args.namespace), tuple(args.model)
    if not args.dry_run and not args.yes:
        plan = remove(
            location, namespaces=namespaces, models=models, everything=everything,
            dry_run=True, settings=settings,
        )
        show(plan, json_mode=args.json, stream=sys.stderr)
        if not _confirmed(plan):
            raise S3KVError("nothing removed: declined at the prompt")
    with watching("rm", resume=RESUME) as progress:
        report = remove(
            location,
            namespaces=namespaces,
            models=models,
            everything=everything,
            dry_run=args.dry_run,
            settings=settings,
            on_progress=progress,
        )
    if args.json:
        jsondoc.emit(jsondoc.rm(report))
    else:
        show(report, json_mode=False, stream=sys.stdout)
    summary(summary_line(report), json_mode=args.json)
    return 0 if report.ok else 1


def _confirmed(plan: RemoveReport) -> bool:
    """Ask on the terminal; with none to ask, stop (a script must say --yes)."""
    if not sys.stdin.isatty():
        raise InvalidInputError(
            "nothing removed: stdin is no terminal to ask on; pass --yes to remove "
            "without a prompt (or --dry-run to only see what would go)"
        )
    question = (
        f"Remove {plural(len(plan.namespaces), 'namespace')} "
        f"({plural(plan.blocks_deleted, 'block')}, {format_bytes(plan.bytes_freed)}) "
        f"from {plan.location}? [y/N] "
    )
    print(question, end="", file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        raise Interrupted("rm: interrupted at the prompt; nothing removed") from None
    return answer.strip().lower() in ("y", "yes")


def show(report: RemoveReport, *, json_mode: bool, stream: Any) -> None:
    """One line per namespace (what it held, what stayed), then failures."""
    from s3kv.cli.ls_table import ranks_text

    if json_mode and stream is sys.stdout:
        return
    would = "would remove" if report.dry_run else "removed"
    for ns in report.namespaces:
        line = (
            f"{would}: {ns.folder} ({ns.model}): ranks {ranks_text(ns.ranks)}, "
            f"{plural(ns.blocks, 'block')}, {format_bytes(ns.bytes)}, manifest {ns.manifest}"
        )
        if ns.blocks_left:
            line += (
                f"; {plural(ns.blocks_left, 'block')} stored meanwhile stayed, with the "
                "manifest (a writer still stores into it: stop it, then run rm again)"
            )
        if ns.stray_keys:
            line += f"; {plural(ns.stray_keys, 'stray key')} left alone"
        print(line, file=stream)
    for key, why in list(report.failures.items())[:20]:
        print(f"failed to delete {key}: {why}", file=stream)


def summary_line(r: RemoveReport) -> str:
    what = (
        f"{plural(r.blocks_deleted, 'block')}, {plural(r.manifests_deleted, 'manifest')}, "
        f"{plural(r.temp_files_deleted, 'stale temp file')}"
    )
    if r.dry_run:
        done = f"would free {format_bytes(r.bytes_freed)} (would delete {what})"
    else:
        done = f"freed {format_bytes(r.bytes_freed)} ({what})"
    left = f"; {plural(r.blocks_left, 'block')} left" if r.blocks_left else ""
    return (
        f"rm: {done} of {plural(len(r.namespaces), 'namespace')}{left}; {len(r.failures)} "
        f"failed; {plural(r.delete_requests, 'delete request')} in {r.seconds:.2f}s at "
        f"{r.location}"
    )
