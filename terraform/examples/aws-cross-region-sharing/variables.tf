variable "primary_region" {
  description = "Region where the cache is written."
  type        = string
  default     = "us-east-1"
}

variable "replica_region" {
  description = "Region whose clusters read a replica of the cache."
  type        = string
  default     = "eu-west-1"
}

variable "prefix" {
  description = "Key prefix s3kv uses in both buckets."
  type        = string
  default     = "kv"
}

variable "reader_principal_arns" {
  description = "Principals of other accounts that may read the primary cache (e.g. arn:aws:iam::111122223333:role/inference)."
  type        = list(string)
  default     = []
}
