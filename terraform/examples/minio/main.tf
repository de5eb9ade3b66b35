provider "minio" {
  minio_server   = var.minio_server
  minio_user     = var.minio_user
  minio_password = var.minio_password
  minio_ssl      = var.minio_ssl
}

module "kv_cache" {
  source = "../../modules/minio"

  endpoint_url = "${var.minio_ssl ? "https" : "http"}://${var.minio_server}"
  bucket       = "s3kv-cache"
  prefix       = var.prefix

  block_expiration_days = 7
}
