terraform {
  # No provider: this module only computes JSON and filters, so tests can
  # render it with a bare Terraform binary and no network.
  required_version = ">= 1.5, < 2.0"
}
