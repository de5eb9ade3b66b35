"""What the benchmarks in bench/ share: payloads and keys, the clients of a row, the
servers and links a row runs on, the workers a row runs in, the quiet-machine rules
(``trust``) and the tables of a result (``*_report``).

Imported as ``bench.lib.NAME`` with the repository's root on ``sys.path`` (the entry
points put it there). These modules may import s3kv, each other and, only when drawing,
``scripts.charts``; never an entry point (``bench/bench_*.py``).
"""
