"""gpuforge guardrail policy pack: policies.py (the pack's list; resource_policies.py,
stack_policies.py and graph.py hold the policies, importable and tested) and __main__.py (the pack)."""
