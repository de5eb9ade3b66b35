output "s3kv_url" {
  description = "Pass to s3kv as the cache location."
  value       = module.kv_cache.s3kv_url
}

output "s3kv_env" {
  description = "Environment for s3kv (endpoint, region, path-style), without credentials."
  value       = module.kv_cache.s3kv_env
}

output "writer_access_key" {
  description = "AWS_ACCESS_KEY_ID for writers."
  value       = module.kv_cache.writer_access_key
}

output "writer_secret_key" {
  description = "AWS_SECRET_ACCESS_KEY for writers."
  value       = module.kv_cache.writer_secret_key
  sensitive   = true
}

output "reader_access_key" {
  description = "AWS_ACCESS_KEY_ID for readers."
  value       = module.kv_cache.reader_access_key
}

output "reader_secret_key" {
  description = "AWS_SECRET_ACCESS_KEY for readers."
  value       = module.kv_cache.reader_secret_key
  sensitive   = true
}
