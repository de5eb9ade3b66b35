variable "endpoint_url" {
  description = "URL s3kv uses to reach MinIO, e.g. https://minio.example.internal:9000. Only feeds the outputs: the provider block holds the admin connection."
  type        = string

  validation {
    condition     = can(regex("^https?://", var.endpoint_url))
    error_message = "endpoint_url must start with http:// or https://."
  }
}

variable "region" {
  description = "Region MinIO is configured with (MinIO answers us-east-1 unless told otherwise). s3kv signs requests for it."
  type        = string
  default     = "us-east-1"
}

variable "bucket" {
  description = "Name of the bucket to create. Conflicts with bucket_prefix; set exactly one."
  type        = string
  default     = null
}

variable "bucket_prefix" {
  description = "Creates a uniquely named bucket beginning with this prefix. Conflicts with bucket; set exactly one."
  type        = string
  default     = null
}

variable "prefix" {
  description = "Key prefix s3kv uses in the bucket, without leading or trailing slash. Grants and lifecycle rules cover \"<prefix>/\" only."
  type        = string
  default     = "s3kv"
}

variable "force_destroy" {
  description = "Let terraform destroy delete a bucket that still holds objects."
  type        = bool
  default     = false
}

variable "versioning_enabled" {
  description = "Turn on bucket versioning. Off by default: blocks are written create-only and expire, so versions would only keep noncurrent copies of disposable data."
  type        = bool
  default     = false
}

variable "block_expiration_days" {
  description = "Days since a block's last use after which it expires (blocks are the objects tagged s3kv-object=block). Last use is Last-Modified, which s3kv's vLLM tier renews when it uses a block older than its renew_after (default 1 day): a block is kept at least block_expiration_days minus renew_after after its last use. Manifests never expire."
  type        = number
  default     = 7

  validation {
    condition     = var.block_expiration_days >= 1 && floor(var.block_expiration_days) == var.block_expiration_days
    error_message = "block_expiration_days must be a whole number of days, at least 1."
  }
}

variable "noncurrent_version_expiration_days" {
  description = "With versioning on: days after which noncurrent versions under the prefix are deleted."
  type        = number
  default     = 1

  validation {
    condition     = var.noncurrent_version_expiration_days >= 1 && floor(var.noncurrent_version_expiration_days) == var.noncurrent_version_expiration_days
    error_message = "noncurrent_version_expiration_days must be a whole number of days, at least 1."
  }
}

variable "policy_name_prefix" {
  description = "Prefix of the MinIO policy and user names. Null uses \"s3kv-<prefix>\"."
  type        = string
  default     = null
}

variable "create_identities" {
  description = "Create a writer and a reader user, each with a service account whose keys s3kv uses. False creates only the policies."
  type        = bool
  default     = true
}

variable "read_bucket_names" {
  description = "Further buckets on this MinIO with caches under the same prefix that the reader and writer may read; writers may copy from them."
  type        = list(string)
  default     = []
}
