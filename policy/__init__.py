"""gpuforge guardrail policy pack: policies.py (importable, tested) and __main__.py (the pack)."""
