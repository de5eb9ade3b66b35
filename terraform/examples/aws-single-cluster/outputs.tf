output "s3kv_url" {
  description = "Pass to s3kv as the cache location."
  value       = module.kv_cache.s3kv_url
}

output "s3kv_env" {
  description = "Environment for the s3kv processes."
  value       = module.kv_cache.s3kv_env
}

output "writer_role_arn" {
  description = "Role for the pods that push blocks (associate it with their service account)."
  value       = module.kv_cache.writer_role_arn
}

output "reader_role_arn" {
  description = "Role for the pods that only look up and load blocks."
  value       = module.kv_cache.reader_role_arn
}
