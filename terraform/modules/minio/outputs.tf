output "bucket" {
  description = "Name of the bucket."
  value       = minio_s3_bucket.this.bucket
}

output "prefix" {
  description = "Key prefix s3kv uses in the bucket (no trailing slash)."
  value       = var.prefix
}

output "region" {
  description = "Region s3kv signs requests for."
  value       = var.region
}

output "endpoint" {
  description = "MinIO endpoint URL s3kv connects to."
  value       = var.endpoint_url
}

output "s3kv_url" {
  description = "Cache location for s3kv: s3://bucket/prefix."
  value       = "s3://${minio_s3_bucket.this.bucket}/${var.prefix}"
}

output "s3kv_env" {
  description = "Environment s3kv reads (endpoint, region, path-style addressing), without credentials."
  value = {
    AWS_ENDPOINT_URL = var.endpoint_url
    AWS_REGION       = var.region
    S3KV_PATH_STYLE  = "true"
  }
}

output "block_tag" {
  description = "The object tag s3kv writes on blocks and the expiry rule filters on."
  value       = module.documents.block_tag
}

output "writer_policy_json" {
  description = "Writer policy document (JSON), as attached to the writer user."
  value       = module.documents.writer_policy_json
}

output "reader_policy_json" {
  description = "Reader policy document (JSON), as attached to the reader user."
  value       = module.documents.reader_policy_json
}

output "writer_policy_name" {
  description = "Name of the MinIO writer policy."
  value       = minio_iam_policy.this["writer"].name
}

output "reader_policy_name" {
  description = "Name of the MinIO reader policy."
  value       = minio_iam_policy.this["reader"].name
}

output "writer_access_key" {
  description = "Access key of the writer service account (AWS_ACCESS_KEY_ID), or null when create_identities is false."
  value       = try(minio_iam_service_account.this["writer"].access_key, null)
}

output "writer_secret_key" {
  description = "Secret key of the writer service account (AWS_SECRET_ACCESS_KEY), or null when create_identities is false."
  value       = try(minio_iam_service_account.this["writer"].secret_key, null)
  sensitive   = true
}

output "reader_access_key" {
  description = "Access key of the reader service account (AWS_ACCESS_KEY_ID), or null when create_identities is false."
  value       = try(minio_iam_service_account.this["reader"].access_key, null)
}

output "reader_secret_key" {
  description = "Secret key of the reader service account (AWS_SECRET_ACCESS_KEY), or null when create_identities is false."
  value       = try(minio_iam_service_account.this["reader"].secret_key, null)
  sensitive   = true
}
