"""Operations on a location: what the commands do, as library functions.

``sync`` (push, pull, cp; its manifests in ``sync_manifest``, its types in
``sync_report``), ``verify``, ``repair`` with ``damage``, ``remove`` (``s3kv rm``), the
census of a location (``scope``, ``inventory``, ``folders``), ``demo`` (the embedded
endpoint), and ``gc/``: collection, its lease and window, and renewal (eviction by last
use). May import everything below: the foundations, ``s3kv.naming``, ``s3kv.stores`` and
``s3kv.transfers``; never the front ends (``s3kv.cli``, ``s3kv.vllm``).
"""
