variable "bucket" {
  description = "Name of the bucket holding the cache (the aws module's bucket output)."
  type        = string
}

variable "prefix" {
  description = "The cache's key prefix, without leading or trailing slash (the aws module's prefix). The tenant's objects live under \"<prefix>/tenants/<tenant>/\"."
  type        = string
  default     = "s3kv"

  validation {
    condition     = length(var.prefix) > 0 && !startswith(var.prefix, "/") && !endswith(var.prefix, "/") && !strcontains(var.prefix, "//") && !strcontains(var.prefix, "*") && !strcontains(var.prefix, "?")
    error_message = "prefix must be non-empty, must not start or end with \"/\", and must not contain \"//\", \"*\" or \"?\"."
  }
}

variable "tenant" {
  description = "The tenant id, as requests name it in kv_transfer_params[\"s3kv_tenant\"] and the command line in --tenant: 1-63 characters of a-z, 0-9, - and _, starting with a letter or digit."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9_-]{0,62}$", var.tenant))
    error_message = "tenant must be 1-63 characters of a-z, 0-9, - and _, starting with a letter or digit."
  }
}

variable "kms_key_arn" {
  description = "The tenant's KMS key, when its objects are encrypted with one (SSE-KMS): the writer gets kms:GenerateDataKey and kms:Decrypt on it, the reader kms:Decrypt. Null with SSE-S3 or SSE-C (s3kv's key per tenant needs no grant: the key travels with each request)."
  type        = string
  default     = null
}

variable "create_iam_policies" {
  description = "Create the tenant's writer and reader IAM managed policies. The JSON documents are output either way."
  type        = bool
  default     = true
}

variable "iam_name_prefix" {
  description = "Prefix of IAM policy and role names. Null uses \"s3kv-<prefix>-<tenant>\"."
  type        = string
  default     = null
}

variable "writer_role" {
  description = "Create an IAM role for the tenant's engines and tools with this trust policy and the tenant's writer policy inline. Null creates none."
  type = object({
    assume_role_policy   = string
    name                 = optional(string)
    max_session_duration = optional(number, 3600)
  })
  default = null
}

variable "reader_role" {
  description = "Create an IAM role for the tenant's readers (read-only tiers) with this trust policy and the tenant's reader policy inline. Null creates none."
  type = object({
    assume_role_policy   = string
    name                 = optional(string)
    max_session_duration = optional(number, 3600)
  })
  default = null
}

variable "tags" {
  description = "Tags for every resource the module creates."
  type        = map(string)
  default     = {}
}
