resource "aws_iam_policy" "writer" {
  count = var.create_iam_policies ? 1 : 0

  name        = "${local.iam_name_prefix}-writer"
  description = "s3kv writer: push, put and gc of KV-cache objects under s3://${aws_s3_bucket.this.id}/${var.prefix}/"
  policy      = module.documents.writer_policy_json
  tags        = var.tags
}

resource "aws_iam_policy" "reader" {
  count = var.create_iam_policies ? 1 : 0

  name        = "${local.iam_name_prefix}-reader"
  description = "s3kv reader: lookups and loads of KV-cache objects under s3://${aws_s3_bucket.this.id}/${var.prefix}/"
  policy      = module.documents.reader_policy_json
  tags        = var.tags
}

resource "aws_iam_role" "writer" {
  count = var.writer_role == null ? 0 : 1

  name                 = coalesce(var.writer_role.name, "${local.iam_name_prefix}-writer")
  assume_role_policy   = var.writer_role.assume_role_policy
  max_session_duration = var.writer_role.max_session_duration
  tags                 = var.tags
}

resource "aws_iam_role_policy" "writer" {
  count = var.writer_role == null ? 0 : 1

  name   = "s3kv-writer"
  role   = aws_iam_role.writer[0].id
  policy = module.documents.writer_policy_json
}

resource "aws_iam_role" "reader" {
  count = var.reader_role == null ? 0 : 1

  name                 = coalesce(var.reader_role.name, "${local.iam_name_prefix}-reader")
  assume_role_policy   = var.reader_role.assume_role_policy
  max_session_duration = var.reader_role.max_session_duration
  tags                 = var.tags
}

resource "aws_iam_role_policy" "reader" {
  count = var.reader_role == null ? 0 : 1

  name   = "s3kv-reader"
  role   = aws_iam_role.reader[0].id
  policy = module.documents.reader_policy_json
}
