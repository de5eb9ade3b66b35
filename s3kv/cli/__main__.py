import sys

from s3kv.cli import main

sys.exit(main())
