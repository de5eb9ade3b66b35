variable "region" {
  description = "Region of the cluster and its cache bucket."
  type        = string
  default     = "us-east-1"
}

variable "prefix" {
  description = "Key prefix s3kv uses in the bucket."
  type        = string
  default     = "kv"
}
