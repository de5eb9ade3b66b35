locals {
  name_prefix = coalesce(var.policy_name_prefix, "s3kv-${replace(var.prefix, "/", "-")}")
  identities  = var.create_identities ? toset(["writer", "reader"]) : toset([])
  policy_json = {
    writer = module.documents.writer_policy_json
    reader = module.documents.reader_policy_json
  }
}

module "documents" {
  source = "../documents"

  # MinIO speaks the AWS policy language with aws-partition ARNs.
  partition         = "aws"
  bucket            = minio_s3_bucket.this.bucket
  prefix            = var.prefix
  read_bucket_names = var.read_bucket_names

  block_expiration_days = var.block_expiration_days
}

resource "minio_s3_bucket" "this" {
  bucket        = var.bucket
  bucket_prefix = var.bucket_prefix
  acl           = "private"
  force_destroy = var.force_destroy

  lifecycle {
    precondition {
      condition     = (var.bucket == null) != (var.bucket_prefix == null)
      error_message = "Set exactly one of bucket and bucket_prefix."
    }
  }
}

resource "minio_s3_bucket_versioning" "this" {
  count = var.versioning_enabled ? 1 : 0

  bucket = minio_s3_bucket.this.bucket

  versioning_configuration {
    status = "Enabled"
  }
}

# Incomplete multipart uploads: MinIO keeps no AbortIncompleteMultipartUpload
# rule; the server itself removes uploads older than its api
# stale_uploads_expiry setting (24h by default), deployment-wide.
resource "minio_ilm_policy" "this" {
  bucket = minio_s3_bucket.this.bucket

  # Expiry counts from Last-Modified, which s3kv's tier renews when it uses a
  # block: days since last use.
  # Blocks carry the s3kv-object=block tag, manifests carry none: only blocks
  # expire. Objects written untagged by other tools are left alone.
  rule {
    id         = "expire-s3kv-blocks"
    filter     = module.documents.block_expiration_filter.and.prefix
    tags       = module.documents.block_expiration_filter.and.tags
    expiration = "${var.block_expiration_days}d"
  }

  dynamic "rule" {
    for_each = var.versioning_enabled ? [1] : []

    content {
      id     = "expire-noncurrent-versions"
      filter = module.documents.prefix_filter.prefix

      noncurrent_expiration {
        days = "${var.noncurrent_version_expiration_days}d"
      }
    }
  }

  depends_on = [minio_s3_bucket_versioning.this]
}

resource "minio_iam_policy" "this" {
  for_each = local.policy_json

  name   = "${local.name_prefix}-${each.key}"
  policy = each.value
}

resource "minio_iam_user" "this" {
  for_each = local.identities

  name = "${local.name_prefix}-${each.key}"
}

resource "minio_iam_user_policy_attachment" "this" {
  for_each = local.identities

  user_name   = minio_iam_user.this[each.key].name
  policy_name = minio_iam_policy.this[each.key].name
}

# s3kv runs with a service account's keys, which inherit the user's policy and
# can be rotated or revoked without touching the user.
resource "minio_iam_service_account" "this" {
  for_each = local.identities

  target_user = minio_iam_user.this[each.key].name
  description = "s3kv ${each.key} for ${minio_s3_bucket.this.bucket}/${var.prefix}"

  depends_on = [minio_iam_user_policy_attachment.this]
}
