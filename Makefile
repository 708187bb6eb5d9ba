# The two commands a newcomer needs (README): `make preview` and `make test`.
.PHONY: setup preview test lint bench bench-validate bench-validate-scale bench-rehearsal
STACK ?= cv-training

setup:
	@scripts/setup.sh

preview: setup
	@.venv/bin/gpuforge preview --stack $(STACK)

test:
	@scripts/setup.sh --with-test-hosts
	@.venv/bin/ruff check .
	@.venv/bin/mypy -p gpuforge
	@.venv/bin/mypy tests bench scripts __main__.py
	@.venv/bin/python -m pytest

lint: setup
	@.venv/bin/ruff check . && .venv/bin/mypy -p gpuforge && .venv/bin/mypy tests bench scripts __main__.py

bench: setup
	@.venv/bin/python bench/preview_scale.py

# Needs root: builds network-namespace test hosts with their own sshd and iperf3.
bench-validate:
	@scripts/setup.sh --with-test-hosts
	@.venv/bin/python -m bench.validate_scale

# validate's orchestrator at 64..1,024 nodes over a replay transport (no hosts, no root; ~3 min)
bench-validate-scale: setup
	@.venv/bin/python -m bench.validate_replay_scale

# Needs root: boots every profile's node from its user data (tests/rehearsal) and times it.
bench-rehearsal:
	@scripts/setup.sh --with-test-hosts
	@.venv/bin/python -m bench.rehearsal
