variable "minio_server" {
  description = "MinIO host and port, e.g. minio.example.internal:9000."
  type        = string
}

variable "minio_ssl" {
  description = "Whether MinIO serves HTTPS."
  type        = bool
  default     = true
}

variable "minio_user" {
  description = "MinIO admin user that creates the bucket, policies and identities."
  type        = string
}

variable "minio_password" {
  description = "Password of minio_user."
  type        = string
  sensitive   = true
}

variable "prefix" {
  description = "Key prefix s3kv uses in the bucket."
  type        = string
  default     = "kv"
}
