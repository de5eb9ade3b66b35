data "aws_partition" "current" {}

locals {
  # The tenant's part of the cache: vLLM's layout, byte for byte, below it.
  tenant_prefix   = "${var.prefix}/tenants/${var.tenant}"
  iam_name_prefix = coalesce(var.iam_name_prefix, "s3kv-${replace(var.prefix, "/", "-")}-${var.tenant}")
}

# The writer and reader documents of the cache, held to the tenant's prefix: every grant
# (objects, the prefix-held listings, the tenant's KMS key) stops at
# "<prefix>/tenants/<tenant>/", so one tenant's credentials never reach another's KV.
module "documents" {
  source = "../documents"

  partition    = data.aws_partition.current.partition
  bucket       = var.bucket
  prefix       = local.tenant_prefix
  kms_key_arns = compact([var.kms_key_arn])
}

resource "aws_iam_policy" "writer" {
  count = var.create_iam_policies ? 1 : 0

  name        = "${local.iam_name_prefix}-writer"
  description = "s3kv writer of tenant ${var.tenant}: its KV under s3://${var.bucket}/${local.tenant_prefix}/"
  policy      = module.documents.writer_policy_json
  tags        = var.tags
}

resource "aws_iam_policy" "reader" {
  count = var.create_iam_policies ? 1 : 0

  name        = "${local.iam_name_prefix}-reader"
  description = "s3kv reader of tenant ${var.tenant}: lookups and loads under s3://${var.bucket}/${local.tenant_prefix}/"
  policy      = module.documents.reader_policy_json
  tags        = var.tags
}

resource "aws_iam_role" "writer" {
  count = var.writer_role == null ? 0 : 1

  name                 = coalesce(var.writer_role.name, "${local.iam_name_prefix}-writer")
  assume_role_policy   = var.writer_role.assume_role_policy
  max_session_duration = var.writer_role.max_session_duration
  tags                 = var.tags
}

resource "aws_iam_role_policy" "writer" {
  count = var.writer_role == null ? 0 : 1

  name   = "s3kv-tenant-writer"
  role   = aws_iam_role.writer[0].id
  policy = module.documents.writer_policy_json
}

resource "aws_iam_role" "reader" {
  count = var.reader_role == null ? 0 : 1

  name                 = coalesce(var.reader_role.name, "${local.iam_name_prefix}-reader")
  assume_role_policy   = var.reader_role.assume_role_policy
  max_session_duration = var.reader_role.max_session_duration
  tags                 = var.tags
}

resource "aws_iam_role_policy" "reader" {
  count = var.reader_role == null ? 0 : 1

  name   = "s3kv-tenant-reader"
  role   = aws_iam_role.reader[0].id
  policy = module.documents.reader_policy_json
}
