locals {
  # s3kv tags every block object it writes with this tag and writes manifests
  # (config.json) untagged: lifecycle filters know prefix, tags and size, not
  # suffixes, so the tag is what lets blocks expire while manifests never do.
  block_tag_key   = "s3kv-object"
  block_tag_value = "block"

  key_prefix = "${var.prefix}/"

  write_bucket_arn = "arn:${var.partition}:s3:::${var.bucket}"
  read_bucket_arns = distinct(concat(
    [local.write_bucket_arn],
    [for name in var.read_bucket_names : "arn:${var.partition}:s3:::${name}"],
  ))

  write_object_arn  = "${local.write_bucket_arn}/${local.key_prefix}*"
  read_object_arns  = [for arn in local.read_bucket_arns : "${arn}/${local.key_prefix}*"]
  list_prefix_match = { "s3:prefix" = ["${local.key_prefix}*"] }

  kms_statements = {
    writer = length(var.kms_key_arns) == 0 ? [] : [{
      Sid      = "UseBucketKey"
      Effect   = "Allow"
      Action   = ["kms:Decrypt", "kms:GenerateDataKey"]
      Resource = var.kms_key_arns
    }]
    reader = length(var.kms_key_arns) == 0 ? [] : [{
      Sid      = "DecryptWithBucketKey"
      Effect   = "Allow"
      Action   = ["kms:Decrypt"]
      Resource = var.kms_key_arns
    }]
  }

  # Lookups (HeadObject) and loads (GetObject) need s3:GetObject; ListBucket,
  # held to the prefix, makes a missing key answer 404 instead of 403 on AWS
  # (Ceph RGW 16 still answers 403; s3kv's tier reads a denied HEAD as absent).
  reader_statements = [
    {
      Sid      = "ListCachePrefix"
      Effect   = "Allow"
      Action   = ["s3:ListBucket"]
      Resource = local.read_bucket_arns
      Condition = {
        StringLike = local.list_prefix_match
      }
    },
    {
      Sid      = "ReadCacheObjects"
      Effect   = "Allow"
      Action   = ["s3:GetObject"]
      Resource = local.read_object_arns
    },
  ]

  writer_statements = [
    {
      Sid      = "ListCachePrefix"
      Effect   = "Allow"
      Action   = ["s3:ListBucket"]
      Resource = local.read_bucket_arns
      Condition = {
        StringLike = local.list_prefix_match
      }
    },
    {
      # ListMultipartUploads has no s3:prefix condition key, so it cannot be
      # held to the prefix; it only reveals keys of uploads in progress.
      Sid      = "ListOwnMultipartUploads"
      Effect   = "Allow"
      Action   = ["s3:ListBucketMultipartUploads"]
      Resource = [local.write_bucket_arn]
    },
    {
      # s3kv gc asks whether the bucket is versioned (a delete there frees
      # nothing), lists what versions stay stored under the prefix, and with
      # --delete-noncurrent-versions removes them.
      Sid      = "ReadBucketVersioning"
      Effect   = "Allow"
      Action   = ["s3:GetBucketVersioning"]
      Resource = [local.write_bucket_arn]
    },
    {
      Sid      = "ListCacheVersions"
      Effect   = "Allow"
      Action   = ["s3:ListBucketVersions"]
      Resource = [local.write_bucket_arn]
      Condition = {
        StringLike = local.list_prefix_match
      }
    },
    {
      # Copy sources: CopyObject reads the source object and its tags (a
      # renewal's source is the block itself). GetObjectTagging also lets a
      # renewal check that the store kept the tags (Ceph RGW drops them).
      Sid      = "ReadCacheObjects"
      Effect   = "Allow"
      Action   = ["s3:GetObject", "s3:GetObjectTagging"]
      Resource = local.read_object_arns
    },
    {
      # PutObject also covers CreateMultipartUpload, UploadPart and
      # CompleteMultipartUpload; PutObjectTagging is checked when PutObject
      # or CopyObject carries tags (the s3kv-object=block tag). Renewal, the
      # copy of a used block onto itself, needs GetObject and GetObjectTagging
      # (above) and PutObject and PutObjectTagging: nothing of its own.
      # DeleteObjectVersion: gc --delete-noncurrent-versions in a versioned bucket.
      Sid    = "WriteCacheObjects"
      Effect = "Allow"
      Action = [
        "s3:AbortMultipartUpload",
        "s3:DeleteObject",
        "s3:DeleteObjectVersion",
        "s3:PutObject",
        "s3:PutObjectTagging",
      ]
      Resource = [local.write_object_arn]
    },
  ]

  # Deny any request that is not over TLS, whoever makes it.
  tls_only_statement = {
    Sid       = "DenyInsecureTransport"
    Effect    = "Deny"
    Principal = "*"
    Action    = "s3:*"
    Resource  = [local.write_bucket_arn, "${local.write_bucket_arn}/*"]
    Condition = {
      Bool = { "aws:SecureTransport" = "false" }
    }
  }

  # Only the reader's statements on this bucket: other buckets have their own policy.
  cross_account_reader_statements = [for statement in [
    {
      Sid       = "CrossAccountListCachePrefix"
      Effect    = "Allow"
      Principal = { AWS = var.reader_principal_arns }
      Action    = ["s3:ListBucket"]
      Resource  = [local.write_bucket_arn]
      Condition = { StringLike = local.list_prefix_match }
    },
    {
      Sid       = "CrossAccountReadCacheObjects"
      Effect    = "Allow"
      Principal = { AWS = var.reader_principal_arns }
      Action    = ["s3:GetObject"]
      Resource  = [local.write_object_arn]
    },
  ] : statement if length(var.reader_principal_arns) > 0]

  replication_source_statements = [for statement in [
    {
      Sid       = "ReplicateIntoCachePrefix"
      Effect    = "Allow"
      Principal = { AWS = var.replication_source_role_arns }
      Action    = ["s3:ReplicateDelete", "s3:ReplicateObject", "s3:ReplicateTags"]
      Resource  = [local.write_object_arn]
    },
    {
      Sid       = "ReadReplicaVersioning"
      Effect    = "Allow"
      Principal = { AWS = var.replication_source_role_arns }
      Action    = ["s3:GetBucketVersioning", "s3:PutBucketVersioning"]
      Resource  = [local.write_bucket_arn]
    },
  ] : statement if length(var.replication_source_role_arns) > 0]

  # The lifecycle rules in the S3 API's own shape (PutBucketLifecycleConfiguration), for
  # stores without a Terraform provider (Ceph RGW) or `aws s3api`. Expiry counts from
  # Last-Modified, which s3kv's tier renews when it uses a block: days since last use.
  block_expiration_rule = {
    ID     = "expire-s3kv-blocks"
    Status = "Enabled"
    Filter = {
      And = {
        Prefix = local.key_prefix
        Tags   = [{ Key = local.block_tag_key, Value = local.block_tag_value }]
      }
    }
    Expiration = { Days = var.block_expiration_days }
  }
  abort_uploads_rule = {
    ID                             = "abort-incomplete-multipart-uploads"
    Status                         = "Enabled"
    Filter                         = { Prefix = local.key_prefix }
    AbortIncompleteMultipartUpload = { DaysAfterInitiation = var.abort_incomplete_multipart_upload_days }
  }
  lifecycle_configuration = {
    Rules = [local.block_expiration_rule, local.abort_uploads_rule]
  }

  bucket_policy = {
    Version = "2012-10-17"
    Statement = concat(
      [local.tls_only_statement],
      local.cross_account_reader_statements,
      local.replication_source_statements,
    )
  }

  writer_policy = {
    Version   = "2012-10-17"
    Statement = concat(local.writer_statements, local.kms_statements.writer)
  }
  reader_policy = {
    Version   = "2012-10-17"
    Statement = concat(local.reader_statements, local.kms_statements.reader)
  }
}
