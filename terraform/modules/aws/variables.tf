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
  description = "Let terraform destroy delete a bucket that still holds objects. Caches are disposable, but the default still protects them."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource the module creates (bucket tags, not object tags)."
  type        = map(string)
  default     = {}
}

variable "kms_key_arn" {
  description = "KMS key for SSE-KMS with an S3 Bucket Key. Null uses SSE-S3 (AES256), which costs no KMS requests."
  type        = string
  default     = null
}

variable "sse_c_enabled" {
  description = "Let writes with a customer-provided key (SSE-C) through: s3kv encrypts each tenant's objects with a key of its own that way (sse_c_secret_file, docs/tenants.md). S3 blocks them on new buckets by default, and so does this module."
  type        = bool
  default     = false
}

variable "versioning_enabled" {
  description = "Turn on bucket versioning. Off by default: blocks are written create-only and expire, so versions would only keep billable noncurrent copies of disposable data. With it on, every renewal (the tier's copy of a used block onto itself, at most one per block per renew_after) and every gc delete leaves a noncurrent version, billed as storage until noncurrent_version_expiration_days; s3kv gc reports them (--delete-noncurrent-versions removes them at once). Forced on when replication or receives_replication is set. (Ceph RGW ignores If-None-Match on versioned buckets, so s3kv refuses to write to one there.)"
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

variable "abort_incomplete_multipart_upload_days" {
  description = "Days after which S3 aborts multipart uploads under the prefix that were never completed, removing their billable parts."
  type        = number
  default     = 1

  validation {
    condition     = var.abort_incomplete_multipart_upload_days >= 1 && floor(var.abort_incomplete_multipart_upload_days) == var.abort_incomplete_multipart_upload_days
    error_message = "abort_incomplete_multipart_upload_days must be a whole number of days, at least 1."
  }
}

variable "noncurrent_version_expiration_days" {
  description = "With versioning on: days after which noncurrent versions under the prefix are deleted (expired delete markers are removed too)."
  type        = number
  default     = 1

  validation {
    condition     = var.noncurrent_version_expiration_days >= 1 && floor(var.noncurrent_version_expiration_days) == var.noncurrent_version_expiration_days
    error_message = "noncurrent_version_expiration_days must be a whole number of days, at least 1."
  }
}

variable "logging" {
  description = "Server access logging: target bucket and key prefix. Null (the default) logs nothing."
  type = object({
    target_bucket = string
    target_prefix = optional(string, "")
  })
  default = null
}

variable "create_iam_policies" {
  description = "Create the writer and reader IAM managed policies. The JSON documents are output either way."
  type        = bool
  default     = true
}

variable "iam_name_prefix" {
  description = "Prefix of IAM policy and role names. Null uses \"s3kv-<prefix>\"."
  type        = string
  default     = null
}

variable "writer_role" {
  description = "Create an IAM role for writers with this trust policy (e.g. EKS IRSA or Pod Identity) and the writer policy inline. Null creates none."
  type = object({
    assume_role_policy   = string
    name                 = optional(string)
    max_session_duration = optional(number, 3600)
  })
  default = null
}

variable "reader_role" {
  description = "Create an IAM role for readers with this trust policy and the reader policy inline. Null creates none."
  type = object({
    assume_role_policy   = string
    name                 = optional(string)
    max_session_duration = optional(number, 3600)
  })
  default = null
}

variable "reader_principal_arns" {
  description = "Principals of other accounts or clusters allowed by the bucket policy to read the prefix. They also need the reader policy in their own account (and kms:Decrypt in the key policy with SSE-KMS)."
  type        = list(string)
  default     = []
}

variable "read_bucket_names" {
  description = "Further buckets with caches under the same prefix that this module's reader and writer may read (replicas, other clusters' caches); writers may copy from them."
  type        = list(string)
  default     = []
}

variable "replication" {
  description = "Replicate the prefix to a bucket in another region (or account). The destination must have versioning on (receives_replication = true in its module). Forces versioning on here."
  type = object({
    destination_bucket_arn  = string
    destination_kms_key_arn = optional(string)
    storage_class           = optional(string, "STANDARD")
    replicate_deletes       = optional(bool, true)
  })
  default = null
}

variable "receives_replication" {
  description = "This bucket is a replication destination: forces versioning on, which S3 requires of both ends."
  type        = bool
  default     = false
}

variable "replication_source_role_arns" {
  description = "Replication roles of source buckets in other accounts allowed by the bucket policy to replicate into the prefix. Same-account replication needs none."
  type        = list(string)
  default     = []
}
