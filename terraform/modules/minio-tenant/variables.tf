variable "bucket" {
  description = "Name of the bucket holding the cache (the minio module's bucket output)."
  type        = string
}

variable "prefix" {
  description = "The cache's key prefix, without leading or trailing slash (the minio module's prefix). The tenant's objects live under \"<prefix>/tenants/<tenant>/\"."
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

variable "policy_name_prefix" {
  description = "Prefix of the MinIO policy and user names. Null uses \"s3kv-<prefix>-<tenant>\"."
  type        = string
  default     = null
}

variable "create_identities" {
  description = "Create a writer and a reader user for the tenant, each with a service account whose keys s3kv uses. False creates only the policies."
  type        = bool
  default     = true
}
