"""``python -m s3kv.worker``: the I/O process (:mod:`s3kv.worker.main`)."""

from s3kv.worker.main import main

raise SystemExit(main())
