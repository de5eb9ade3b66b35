locals {
  replication_source_key_prefix = "${aws_s3_bucket.this.arn}/${var.prefix}/*"

  replication_role_policy = var.replication == null ? null : {
    Version = "2012-10-17"
    Statement = concat(
      [
        {
          Sid      = "ReadReplicationConfiguration"
          Effect   = "Allow"
          Action   = ["s3:GetReplicationConfiguration", "s3:ListBucket"]
          Resource = [aws_s3_bucket.this.arn]
        },
        {
          Sid    = "ReadSourceVersions"
          Effect = "Allow"
          Action = [
            "s3:GetObjectVersionAcl",
            "s3:GetObjectVersionForReplication",
            "s3:GetObjectVersionTagging",
          ]
          Resource = [local.replication_source_key_prefix]
        },
        {
          # Tags must travel: the replica's own lifecycle rule expires blocks
          # by their s3kv-object tag (lifecycle deletes are never replicated).
          Sid      = "WriteReplicas"
          Effect   = "Allow"
          Action   = ["s3:ReplicateDelete", "s3:ReplicateObject", "s3:ReplicateTags"]
          Resource = ["${var.replication.destination_bucket_arn}/${var.prefix}/*"]
        },
      ],
      [for statement in [{
        Sid      = "DecryptSource"
        Effect   = "Allow"
        Action   = ["kms:Decrypt"]
        Resource = [var.kms_key_arn]
      }] : statement if var.kms_key_arn != null],
      [for statement in [{
        Sid      = "EncryptReplicas"
        Effect   = "Allow"
        Action   = ["kms:Encrypt"]
        Resource = [var.replication.destination_kms_key_arn]
      }] : statement if var.replication.destination_kms_key_arn != null],
    )
  }
}

resource "aws_iam_role" "replication" {
  count = var.replication == null ? 0 : 1

  name = "${local.iam_name_prefix}-replication"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "s3.amazonaws.com" }
      Action    = "sts:AssumeRole"
    }]
  })
  tags = var.tags
}

resource "aws_iam_role_policy" "replication" {
  count = var.replication == null ? 0 : 1

  name   = "s3kv-replication"
  role   = aws_iam_role.replication[0].id
  policy = jsonencode(local.replication_role_policy)
}

resource "aws_s3_bucket_replication_configuration" "this" {
  count = var.replication == null ? 0 : 1

  bucket = aws_s3_bucket.this.id
  role   = aws_iam_role.replication[0].arn

  rule {
    id     = "replicate-s3kv-prefix"
    status = "Enabled"

    filter {
      prefix = module.documents.prefix_filter.prefix
    }

    # gc deletes on the source reach the replica as delete markers.
    delete_marker_replication {
      status = var.replication.replicate_deletes ? "Enabled" : "Disabled"
    }

    dynamic "source_selection_criteria" {
      for_each = var.kms_key_arn == null ? [] : [1]

      content {
        sse_kms_encrypted_objects {
          status = "Enabled"
        }
      }
    }

    destination {
      bucket        = var.replication.destination_bucket_arn
      storage_class = var.replication.storage_class

      dynamic "encryption_configuration" {
        for_each = var.replication.destination_kms_key_arn == null ? [] : [1]

        content {
          replica_kms_key_id = var.replication.destination_kms_key_arn
        }
      }
    }
  }

  # S3 refuses a replication configuration until versioning is Enabled.
  depends_on = [aws_s3_bucket_versioning.this]
}
