"""Listings and transfers: blocks to a store and back, and walks over a location's keys.

``uploader`` and ``downloader`` are the library's block API (create-only, checksummed,
zero-copy into the caller's rows); ``jobs`` runs a batch without blocking the caller (vLLM's
scheduler polls it), one job type for every store; ``writes`` is the create-only rule, written
once; ``transfer`` the one-shot batch helpers; ``lookup`` answers "which of these blocks
are stored"; ``listing`` walks a location's keys once; ``stored_manifest`` reads a
namespace's manifest from a store, capped, and holds it to its folder. May import
the foundations, ``s3kv.naming`` and ``s3kv.stores``, never operations or front ends.
"""
