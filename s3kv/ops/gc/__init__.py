"""Garbage collection and renewal: keeping a cache to what is used.

``collect`` is ``s3kv gc`` (blocks not used within a window, strays, old uploads and
versions, manifests of empty namespaces); ``lease`` keeps two collectors from running at
once; ``window`` decides what is old; ``manifests`` and ``versions`` are gc's work on
manifests and on versioned buckets; ``renewal`` and ``renewal_queue`` renew the blocks
an engine uses, so collection keeps them. Same imports as :mod:`s3kv.ops`.
"""
