"""Tenants: who a request's KV belongs to, and where a tenant's KV lives.

A tenant id is 1-63 characters of ``a-z``, ``0-9``, ``-`` and ``_``, starting with a
letter or digit: it is one path segment that cannot leave its place (no ``/``, ``.``,
``%`` or character outside ASCII), and the same name is valid in an IAM policy's
resource, a Prometheus label and a file name. Anything else is refused, never repaired:
``Acme`` is not read as ``acme``, since two spellings of one tenant would be two caches.

A tenant's namespaces live under ``<prefix>/tenants/<tenant>/``, above vLLM's layout,
which stays byte-identical below it (:func:`tenant_prefix`)::

    <prefix>/tenants/<tenant>/<folder>/config.json
    <prefix>/tenants/<tenant>/<folder>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin

so a tenant's data is one prefix for IAM, lifecycle rules and every ``s3kv`` command.
:func:`tenant_of_key` reads the tenant back from a block or manifest key: the segment
right above the namespace folder, under a ``tenants`` segment.
"""

from __future__ import annotations

import re

from s3kv.errors import InvalidTenantError, describe_value
from s3kv.naming.keys import join_prefix
from s3kv.naming.namespace import CONFIG_FILENAME

TENANT_FIELD = "s3kv_tenant"
"""The field of a request's ``kv_transfer_params`` that names its tenant."""

TENANTS_FOLDER = "tenants"
"""The folder under a location's prefix that holds one folder per tenant."""

MAX_TENANT_CHARS = 63

_TENANT = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}", re.ASCII)

RULE = (
    "a tenant id is 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or "
    "digit"
)


def check_tenant(value: object, *, source: str = "tenant") -> str:
    """``value`` when it is a valid tenant id; else :class:`InvalidTenantError` naming
    ``source`` (where it came from: a flag, a request field) and the rule."""
    if not isinstance(value, str):
        raise InvalidTenantError(
            f"{source} must be a string; got {type(value).__name__} {describe_value(value)} "
            f"({RULE})"
        )
    if _TENANT.fullmatch(value):
        return value
    if not value:
        why = "is empty"
    elif len(value) > MAX_TENANT_CHARS:
        why = f"is {len(value)} characters long, more than {MAX_TENANT_CHARS}"
    elif value.isascii() and _TENANT.fullmatch(value.lower()):
        why = "has upper-case letters (tenant ids are lower case; give it as it is stored)"
    else:
        bad = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c in "-_"))})
        if bad:
            shown = ", ".join(repr(c) if c.isprintable() else f"U+{ord(c):04X}" for c in bad)
            why = f"holds {shown}"
        else:
            why = "does not start with a letter or digit"
    raise InvalidTenantError(f"{source} {describe_value(value, 40)} {why}: {RULE}")


def is_tenant(value: str) -> bool:
    """Whether ``value`` is a valid tenant id (:func:`check_tenant` without the error)."""
    return _TENANT.fullmatch(value) is not None


def tenants_prefix(prefix: str) -> str:
    """The listing prefix of every tenant under a location's ``prefix`` (ends with ``/``)."""
    return join_prefix(prefix, f"{TENANTS_FOLDER}/")


def tenant_prefix(prefix: str, tenant: str) -> str:
    """``<prefix>/tenants/<tenant>``: where ``tenant``'s namespaces live (vLLM's layout
    below it, as it would be below ``prefix``)."""
    return join_prefix(prefix, f"{TENANTS_FOLDER}/{check_tenant(tenant)}")


def tenant_of_key(key: str) -> str | None:
    """The tenant a block or manifest key belongs to, or None (a key outside every
    tenant's prefix, or no key of the layout).

    The tenant is the segment right above the namespace folder when the one above it is
    ``tenants``: for a block key the fifth segment from the end, for a manifest the
    third. Pure string work, a handful of splits: every request of a store that encrypts
    per tenant asks it.
    """
    if key.endswith(".bin"):
        below = 4  # <tenant>/<folder>_r<rank>/<hhh>/<hh>_g<group>/<hash>.bin
    elif key.endswith("/" + CONFIG_FILENAME):
        below = 2  # <tenant>/<folder>/config.json
    else:
        return None
    parts = key.rsplit("/", below + 1)
    if len(parts) != below + 2 or parts[0].rpartition("/")[2] != TENANTS_FOLDER:
        return None
    tenant = parts[1]
    return tenant if _TENANT.fullmatch(tenant) else None
