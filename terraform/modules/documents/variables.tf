variable "partition" {
  description = "ARN partition of the buckets: aws, aws-cn or aws-us-gov. MinIO uses aws."
  type        = string
  default     = "aws"

  validation {
    condition     = contains(["aws", "aws-cn", "aws-us-gov"], var.partition)
    error_message = "partition must be one of aws, aws-cn, aws-us-gov."
  }
}

variable "bucket" {
  description = "Name of the bucket s3kv writes to (the writer's only write target)."
  type        = string

  validation {
    condition     = length(var.bucket) >= 3 && length(var.bucket) <= 63
    error_message = "bucket must be 3 to 63 characters long."
  }
}

variable "prefix" {
  description = "Key prefix s3kv uses inside the bucket, without leading or trailing slash (s3kv_url = s3://bucket/prefix). Every grant and lifecycle rule is scoped to \"<prefix>/\"."
  type        = string

  validation {
    condition     = length(var.prefix) > 0 && !startswith(var.prefix, "/") && !endswith(var.prefix, "/") && !strcontains(var.prefix, "//") && !strcontains(var.prefix, "*") && !strcontains(var.prefix, "?")
    error_message = "prefix must be non-empty, must not start or end with \"/\", and must not contain \"//\", \"*\" or \"?\"."
  }
}

variable "read_bucket_names" {
  description = "Further buckets, holding caches under the same prefix, that readers may load from and writers may copy from (replicas, other clusters' caches)."
  type        = list(string)
  default     = []
}

variable "kms_key_arns" {
  description = "KMS keys that encrypt the buckets. The writer gets kms:GenerateDataKey and kms:Decrypt on them, the reader kms:Decrypt. Empty for SSE-S3 or MinIO."
  type        = list(string)
  default     = []
}

variable "reader_principal_arns" {
  description = "Principals (roles, users or account roots of other accounts) that the bucket policy lets read the cache: the reader's grants, with these as Principal."
  type        = list(string)
  default     = []
}

variable "replication_source_role_arns" {
  description = "Replication roles of source buckets in other accounts that the bucket policy lets replicate into the prefix. Same-account replication needs none."
  type        = list(string)
  default     = []
}

variable "block_expiration_days" {
  description = "Days since a block's last use after which it expires. s3kv's vLLM tier renews a block it uses once its Last-Modified is older than renew_after (default 1 day), so a block is kept at least block_expiration_days minus renew_after after its last use. Manifests never expire."
  type        = number
  default     = 7

  validation {
    condition     = var.block_expiration_days >= 1 && floor(var.block_expiration_days) == var.block_expiration_days
    error_message = "block_expiration_days must be a whole number of days, at least 1."
  }
}

variable "abort_incomplete_multipart_upload_days" {
  description = "Days after which incomplete multipart uploads under the prefix are aborted, removing their billable parts."
  type        = number
  default     = 1

  validation {
    condition     = var.abort_incomplete_multipart_upload_days >= 1 && floor(var.abort_incomplete_multipart_upload_days) == var.abort_incomplete_multipart_upload_days
    error_message = "abort_incomplete_multipart_upload_days must be a whole number of days, at least 1."
  }
}
