"""`gpuforge preflight`: prove against the AWS APIs that a stack can deploy, and pick its AZ.

One module per domain of checks (account, compute, quota, capacity, storage, resources), each a
`run(ctx)` that returns `CheckResult`s and records per-AZ evidence; `ranking` turns the
evidence into an AZ choice; `runner` puts it together. Every AWS call goes through `aws.Aws`,
which turns "not allowed" and "not served" into a reason instead of an exception.
"""
