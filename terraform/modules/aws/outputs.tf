output "bucket" {
  description = "Name of the bucket."
  value       = aws_s3_bucket.this.id
}

output "bucket_arn" {
  description = "ARN of the bucket."
  value       = aws_s3_bucket.this.arn
}

output "prefix" {
  description = "Key prefix s3kv uses in the bucket (no trailing slash)."
  value       = var.prefix
}

output "region" {
  description = "Region of the bucket."
  value       = aws_s3_bucket.this.region
}

output "endpoint" {
  description = "Regional S3 endpoint of the bucket. s3kv does not need it on AWS (the SDK derives it from the region); given for other tools."
  value       = "https://s3.${aws_s3_bucket.this.region}.${data.aws_partition.current.dns_suffix}"
}

output "s3kv_url" {
  description = "Cache location for s3kv: s3://bucket/prefix."
  value       = "s3://${aws_s3_bucket.this.id}/${var.prefix}"
}

output "s3kv_env" {
  description = "Environment s3kv reads, ready to merge into a pod or process environment."
  value = {
    AWS_REGION = aws_s3_bucket.this.region
  }
}

output "versioning_enabled" {
  description = "Whether versioning is on (asked for, or forced by replication)."
  value       = local.versioning_enabled
}

output "block_tag" {
  description = "The object tag s3kv writes on blocks and the expiry rule filters on."
  value       = module.documents.block_tag
}

output "writer_policy_json" {
  description = "Writer IAM policy document (JSON)."
  value       = module.documents.writer_policy_json
}

output "reader_policy_json" {
  description = "Reader IAM policy document (JSON)."
  value       = module.documents.reader_policy_json
}

output "writer_policy_arn" {
  description = "ARN of the writer managed policy, or null when create_iam_policies is false."
  value       = try(aws_iam_policy.writer[0].arn, null)
}

output "reader_policy_arn" {
  description = "ARN of the reader managed policy, or null when create_iam_policies is false."
  value       = try(aws_iam_policy.reader[0].arn, null)
}

output "writer_role_arn" {
  description = "ARN of the writer role, or null when writer_role is not set."
  value       = try(aws_iam_role.writer[0].arn, null)
}

output "reader_role_arn" {
  description = "ARN of the reader role, or null when reader_role is not set."
  value       = try(aws_iam_role.reader[0].arn, null)
}

output "replication_role_arn" {
  description = "ARN of the replication role, or null without replication. Give it to the destination's replication_source_role_arns when that bucket is in another account."
  value       = try(aws_iam_role.replication[0].arn, null)
}
