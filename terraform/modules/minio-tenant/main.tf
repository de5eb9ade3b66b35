locals {
  # The tenant's part of the cache: vLLM's layout, byte for byte, below it.
  tenant_prefix = "${var.prefix}/tenants/${var.tenant}"
  name_prefix   = coalesce(var.policy_name_prefix, "s3kv-${replace(var.prefix, "/", "-")}-${var.tenant}")
  identities    = var.create_identities ? toset(["writer", "reader"]) : toset([])
  policy_json = {
    writer = module.documents.writer_policy_json
    reader = module.documents.reader_policy_json
  }
}

# The cache's writer and reader documents, held to the tenant's prefix: one tenant's
# keys never reach another's KV.
module "documents" {
  source = "../documents"

  # MinIO speaks the AWS policy language with aws-partition ARNs.
  partition = "aws"
  bucket    = var.bucket
  prefix    = local.tenant_prefix
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

resource "minio_iam_service_account" "this" {
  for_each = local.identities

  target_user = minio_iam_user.this[each.key].name
  description = "s3kv ${each.key} of tenant ${var.tenant} for ${var.bucket}/${var.prefix}"

  depends_on = [minio_iam_user_policy_attachment.this]
}
