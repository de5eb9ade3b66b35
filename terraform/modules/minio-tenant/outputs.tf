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
  description = "Environment s3kv's command line reads for this tenant (merge with the minio module's s3kv_env)."
  value = {
    S3KV_TENANT = var.tenant
  }
}

output "writer_policy_json" {
  description = "The tenant's writer policy document (JSON), as attached to its writer user."
  value       = module.documents.writer_policy_json
}

output "reader_policy_json" {
  description = "The tenant's reader policy document (JSON), as attached to its reader user."
  value       = module.documents.reader_policy_json
}

output "writer_policy_name" {
  description = "Name of the tenant's MinIO writer policy."
  value       = minio_iam_policy.this["writer"].name
}

output "reader_policy_name" {
  description = "Name of the tenant's MinIO reader policy."
  value       = minio_iam_policy.this["reader"].name
}

output "writer_access_key" {
  description = "Access key of the tenant's writer service account, or null when create_identities is false."
  value       = try(minio_iam_service_account.this["writer"].access_key, null)
}

output "writer_secret_key" {
  description = "Secret key of the tenant's writer service account, or null when create_identities is false."
  value       = try(minio_iam_service_account.this["writer"].secret_key, null)
  sensitive   = true
}

output "reader_access_key" {
  description = "Access key of the tenant's reader service account, or null when create_identities is false."
  value       = try(minio_iam_service_account.this["reader"].access_key, null)
}

output "reader_secret_key" {
  description = "Secret key of the tenant's reader service account, or null when create_identities is false."
  value       = try(minio_iam_service_account.this["reader"].secret_key, null)
  sensitive   = true
}
