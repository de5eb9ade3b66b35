output "writer_policy_json" {
  description = "IAM policy document (JSON) for s3kv writers: push, put and gc under the prefix."
  value       = jsonencode(local.writer_policy)
}

output "reader_policy_json" {
  description = "IAM policy document (JSON) for s3kv readers: lookups and loads under the prefix, nothing that writes or deletes."
  value       = jsonencode(local.reader_policy)
}

output "bucket_policy_json" {
  description = "Bucket policy (JSON): deny requests without TLS, let reader_principal_arns read the prefix and replication_source_role_arns replicate into it."
  value       = jsonencode(local.bucket_policy)
}

output "key_prefix" {
  description = "The prefix with its trailing slash, as object keys start."
  value       = local.key_prefix
}

output "block_tag" {
  description = "The object tag s3kv puts on every block it writes (and never on manifests)."
  value       = { (local.block_tag_key) = local.block_tag_value }
}

output "block_expiration_filter" {
  description = "Lifecycle filter, in the shape of the aws_s3_bucket_lifecycle_configuration filter block, that matches s3kv blocks and never manifests."
  value = {
    and = {
      prefix = local.key_prefix
      tags   = { (local.block_tag_key) = local.block_tag_value }
    }
  }
}

output "prefix_filter" {
  description = "Lifecycle filter matching everything under the prefix: for aborting incomplete multipart uploads (S3 refuses tag filters on that action) and for noncurrent versions."
  value       = { prefix = local.key_prefix }
}

output "block_expiration_days" {
  description = "Days since a block's last use after which the block expiration rule expires it (as given)."
  value       = var.block_expiration_days
}

output "lifecycle_configuration_json" {
  description = "The lifecycle configuration (JSON, the S3 API's PutBucketLifecycleConfiguration shape): blocks expire block_expiration_days after their last use, manifests never, incomplete multipart uploads are aborted. For `aws s3api put-bucket-lifecycle-configuration` on stores without a Terraform provider (Ceph RGW)."
  value       = jsonencode(local.lifecycle_configuration)
}
