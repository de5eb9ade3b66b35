output "tenant" {
  description = "The tenant id (kv_transfer_params[\"s3kv_tenant\"], --tenant, S3KV_TENANT)."
  value       = var.tenant
}

output "key_prefix" {
  description = "Where the tenant's objects start: \"<prefix>/tenants/<tenant>/\"."
  value       = module.documents.key_prefix
}

output "s3kv_url" {
  description = "The cache location s3kv takes (s3://bucket/prefix); the tenant is given apart (--tenant, or each request's s3kv_tenant)."
  value       = "s3://${var.bucket}/${var.prefix}"
}

output "s3kv_tenant_url" {
  description = "The tenant's part of the cache: s3://bucket/prefix/tenants/tenant."
  value       = "s3://${var.bucket}/${local.tenant_prefix}"
}

output "s3kv_env" {
  description = "Environment s3kv's command line reads for this tenant (merge with the bucket module's s3kv_env)."
  value = {
    S3KV_TENANT = var.tenant
  }
}

output "writer_policy_json" {
  description = "The tenant's writer IAM policy document (JSON): its prefix only."
  value       = module.documents.writer_policy_json
}

output "reader_policy_json" {
  description = "The tenant's reader IAM policy document (JSON): lookups and loads under its prefix only."
  value       = module.documents.reader_policy_json
}

output "writer_policy_arn" {
  description = "ARN of the tenant's writer managed policy, or null when create_iam_policies is false."
  value       = try(aws_iam_policy.writer[0].arn, null)
}

output "reader_policy_arn" {
  description = "ARN of the tenant's reader managed policy, or null when create_iam_policies is false."
  value       = try(aws_iam_policy.reader[0].arn, null)
}

output "writer_role_arn" {
  description = "ARN of the tenant's writer role, or null when writer_role is null."
  value       = try(aws_iam_role.writer[0].arn, null)
}

output "reader_role_arn" {
  description = "ARN of the tenant's reader role, or null when reader_role is null."
  value       = try(aws_iam_role.reader[0].arn, null)
}
