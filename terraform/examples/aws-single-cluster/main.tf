provider "aws" {
  region = var.region
}

locals {
  # EKS Pod Identity: pods whose service account is associated with a role
  # assume it through this service principal.
  pod_identity_trust = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "pods.eks.amazonaws.com" }
      Action    = ["sts:AssumeRole", "sts:TagSession"]
    }]
  })
}

module "kv_cache" {
  source = "../../modules/aws"

  bucket_prefix = "s3kv-cache-"
  prefix        = var.prefix

  block_expiration_days = 7

  writer_role = { assume_role_policy = local.pod_identity_trust }
  reader_role = { assume_role_policy = local.pod_identity_trust }

  tags = {
    Project = "s3kv-example"
  }
}
