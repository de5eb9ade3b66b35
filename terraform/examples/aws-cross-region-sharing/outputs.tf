output "primary_s3kv_url" {
  description = "Cache location for clusters in the primary region (writers and readers)."
  value       = module.primary.s3kv_url
}

output "primary_s3kv_env" {
  description = "Environment for s3kv in the primary region."
  value       = module.primary.s3kv_env
}

output "replica_s3kv_url" {
  description = "Cache location for readers in the replica region."
  value       = module.replica.s3kv_url
}

output "replica_s3kv_env" {
  description = "Environment for s3kv readers in the replica region."
  value       = module.replica.s3kv_env
}

output "primary_writer_policy_arn" {
  description = "Attach to the writers of the primary region."
  value       = module.primary.writer_policy_arn
}

output "primary_reader_policy_arn" {
  description = "Attach to readers of the primary region."
  value       = module.primary.reader_policy_arn
}

output "replica_reader_policy_arn" {
  description = "Attach to readers of the replica region. Do not give writers the replica: replication writes it."
  value       = module.replica.reader_policy_arn
}

output "reader_policy_json" {
  description = "Reader policy for principals in other accounts (reader_principal_arns) to attach in their own account."
  value       = module.primary.reader_policy_json
}
