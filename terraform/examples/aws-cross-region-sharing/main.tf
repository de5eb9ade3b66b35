provider "aws" {
  region = var.primary_region
}

provider "aws" {
  alias  = "replica"
  region = var.replica_region
}

# The replica receives the prefix from the primary. Its own lifecycle rule
# expires blocks by the replicated s3kv-object tag: S3 never replicates
# lifecycle deletions, so each bucket expires its own copies.
module "replica" {
  source = "../../modules/aws"
  providers = {
    aws = aws.replica
  }

  bucket_prefix        = "s3kv-replica-"
  prefix               = var.prefix
  receives_replication = true
}

module "primary" {
  source = "../../modules/aws"

  bucket_prefix         = "s3kv-primary-"
  prefix                = var.prefix
  reader_principal_arns = var.reader_principal_arns

  replication = {
    destination_bucket_arn = module.replica.bucket_arn
  }
}
