# llmao fleet: the entry points users and CI rely on (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.llmao-setup

.PHONY: setup litellm-venv setup-vllm demo demo-stop demo-roll test lint sanity bench collection box-program clean

setup: $(STAMP) litellm-venv

# The real LiteLLM proxy the tests and the demo run, in its own environment (~750 MB).
litellm-venv:
	@bash rig/litellm_venv.sh

# The real vLLM (CPU build, ~2.5 GB) and the tiny model its tests serve, both made once; the
# tests that need them are skipped, with the reason, where they are missing.
setup-vllm:
	@bash rig/vllm_venv.sh
	@if [ -x .venv-vllm/bin/vllm ]; then mkdir -p .cache/tiny-llama.tmp && \
		TMPDIR=.cache/tiny-llama.tmp .venv-vllm/bin/python rig/tiny_model.py .cache/tiny-llama; fi

$(STAMP): pyproject.toml requirements.yml
	@echo "==> creating $(VENV) and installing llmao fleet (editable) with its test tools"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -qq --upgrade pip
	@$(BIN)/python -m pip install -qq -e '.[test]'
	@echo "==> the collections the project uses (community.general, community.docker, ansible.posix)"
	@$(BIN)/python scripts/bundled_collections.py
	@touch $@

demo: setup
	@$(BIN)/python -m demo

demo-stop:
	@$(BIN)/python -m demo stop

# MODEL=<name> picks the model whose max_model_len changes (default: the first with one).
demo-roll: setup
	@$(BIN)/python -m demo roll $(if $(MODEL),--model $(MODEL))

test: setup setup-vllm
	@$(BIN)/python -m pytest

# ruff, then ansible-lint's production profile (settings in .ansible-lint; offline).
lint: setup
	@$(BIN)/ruff check .
	@PATH="$(abspath $(BIN)):$$PATH" $(BIN)/ansible-lint --profile production

# ansible-test sanity and the collection's unit tests, on every ansible-core release
# requires_ansible claims, each in its own environment under .cache/ansible-core.
sanity: setup
	@$(BIN)/python scripts/ansible_core_matrix.py

bench: setup
	@$(BIN)/python -m bench

# The collection's tarball in dist/, carrying docs/ (the pages its plugins name): see
# scripts/build_collection.py.
collection: setup
	@$(BIN)/python scripts/build_collection.py --output-path dist

# The box program: its package (roles/vllm_box/files/box_program/) and the core modules it
# imports joined into the one file boxes fetch, install_set.py, which is committed (a test
# fails when it is not a fresh build). Standard library only: it needs no setup.
box-program:
	@$(PYTHON) scripts/build_box_program.py

clean:
	rm -rf $(VENV) .venv-litellm .venv-vllm .cache/tiny-llama* .pytest_cache .ruff_cache
