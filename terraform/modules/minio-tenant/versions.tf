terraform {
  required_version = ">= 1.5, < 2.0"

  required_providers {
    minio = {
      source  = "aminueza/minio"
      version = ">= 3.40, < 4.0"
    }
  }
}
