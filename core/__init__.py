"""The bottom layer every other part reads: what a cluster is.

The catalog of instance shapes and prices, the reference profiles, the stack-config schema and the
pulumi-free arithmetic built on them (cost, fleet guardrails, addressing, Slurm and Kubernetes
settings). Pure Python: nothing here imports pulumi, boto3, jinja2 or kubernetes, so the light base
install (nodes, health check, job cost on a head node) can use it.
"""
