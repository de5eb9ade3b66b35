data "aws_partition" "current" {}

locals {
  # Replication needs versioning on the source and on the destination bucket,
  # so either role forces it on whatever versioning_enabled says.
  versioning_enabled = var.versioning_enabled || var.replication != null || var.receives_replication

  iam_name_prefix = coalesce(var.iam_name_prefix, "s3kv-${replace(var.prefix, "/", "-")}")
}

module "documents" {
  source = "../documents"

  partition                    = data.aws_partition.current.partition
  bucket                       = aws_s3_bucket.this.id
  prefix                       = var.prefix
  read_bucket_names            = var.read_bucket_names
  kms_key_arns                 = compact([var.kms_key_arn])
  reader_principal_arns        = var.reader_principal_arns
  replication_source_role_arns = var.replication_source_role_arns

  block_expiration_days                  = var.block_expiration_days
  abort_incomplete_multipart_upload_days = var.abort_incomplete_multipart_upload_days
}

resource "aws_s3_bucket" "this" {
  #checkov:skip=CKV_AWS_18:Access logging costs a second bucket and a write per request; it is the user's choice through var.logging (aws_s3_bucket_logging below).
  #checkov:skip=CKV_AWS_21:Versioning is off by default on purpose: blocks are disposable, written create-only and expired, so versions only keep billable copies; var.versioning_enabled turns it on and replication forces it.
  #checkov:skip=CKV_AWS_144:Cross-region replication is optional (var.replication); a single-region cache is rebuilt by recomputing the KV blocks, it holds no data of record.
  #checkov:skip=CKV_AWS_145:SSE-S3 is the default because SSE-KMS adds a KMS request per object; var.kms_key_arn switches to SSE-KMS with an S3 Bucket Key.
  #checkov:skip=CKV2_AWS_62:Event notifications have no consumer here: s3kv discovers blocks by key, never by events.
  bucket        = var.bucket
  bucket_prefix = var.bucket_prefix
  force_destroy = var.force_destroy

  tags = var.tags

  lifecycle {
    precondition {
      condition     = (var.bucket == null) != (var.bucket_prefix == null)
      error_message = "Set exactly one of bucket and bucket_prefix."
    }
  }
}

resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  bucket = aws_s3_bucket.this.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn == null ? "AES256" : "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    # A Bucket Key cuts KMS requests (and their cost) by reusing a data key
    # per bucket; it is ignored with SSE-S3.
    bucket_key_enabled = var.kms_key_arn != null
    # S3 blocks writes with customer keys on new buckets (since 2026); s3kv's key per
    # tenant (SSE-C, sse_c_secret_file) needs them let through.
    blocked_encryption_types = var.sse_c_enabled ? ["NONE"] : ["SSE-C"]
  }
}

resource "aws_s3_bucket_versioning" "this" {
  count = local.versioning_enabled ? 1 : 0

  bucket = aws_s3_bucket.this.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_policy" "this" {
  bucket = aws_s3_bucket.this.id
  policy = module.documents.bucket_policy_json

  # S3 answers OperationAborted to concurrent configuration changes on one
  # bucket; writing the policy after the public access block avoids that.
  depends_on = [aws_s3_bucket_public_access_block.this]
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  #checkov:skip=CKV_AWS_300:Rule abort-incomplete-multipart-uploads does abort them, held to the s3kv prefix like every rule here; this check only accepts a bucket-wide rule.
  bucket = aws_s3_bucket.this.id

  rule {
    id     = "expire-s3kv-blocks"
    status = "Enabled"

    # Blocks carry the s3kv-object=block tag, manifests carry none: only
    # blocks expire. Blocks written by other tools (vLLM's object tier) carry
    # no tag either and are left alone. Expiry counts from Last-Modified,
    # which s3kv's tier renews when it uses a block: days since last use.
    filter {
      and {
        prefix = module.documents.block_expiration_filter.and.prefix
        tags   = module.documents.block_expiration_filter.and.tags
      }
    }

    expiration {
      days = var.block_expiration_days
    }
  }

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"

    # S3 refuses a tag filter on this action, hence a rule of its own.
    filter {
      prefix = module.documents.prefix_filter.prefix
    }

    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_upload_days
    }
  }

  dynamic "rule" {
    for_each = local.versioning_enabled ? [1] : []

    content {
      id     = "expire-noncurrent-versions"
      status = "Enabled"

      filter {
        prefix = module.documents.prefix_filter.prefix
      }

      noncurrent_version_expiration {
        noncurrent_days = var.noncurrent_version_expiration_days
      }

      expiration {
        expired_object_delete_marker = true
      }
    }
  }

  # The lifecycle API rejects noncurrent rules until versioning is on.
  depends_on = [aws_s3_bucket_versioning.this]
}

resource "aws_s3_bucket_logging" "this" {
  count = var.logging == null ? 0 : 1

  bucket        = aws_s3_bucket.this.id
  target_bucket = var.logging.target_bucket
  target_prefix = var.logging.target_prefix
}
