from s3kv.cli import console

console()
