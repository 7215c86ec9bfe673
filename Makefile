# The whole gate is `make check`; `make test` and `make demo` set themselves up on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION ?= 20

.PHONY: install browser test test-unit test-integration test-infra test-e2e lint checkov typecheck check demo synth bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/python -m infra.build_layers
	touch $(STAMP)

# The portal's browser tests drive the distribution's Chromium and its driver (never a browser
# downloaded at run time); installed here when missing.
CHROMIUM := /usr/bin/chromium
CHROMEDRIVER := /usr/bin/chromedriver
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

browser:
	@if [ ! -x $(CHROMIUM) ] || [ ! -x $(CHROMEDRIVER) ]; then \
		echo "installing chromium and chromium-driver (apt-get)"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends chromium chromium-driver >/dev/null; \
	fi

test: $(STAMP) browser
	$(BIN)/pytest

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit

test-integration: $(STAMP)
	$(BIN)/pytest tests/integration

test-infra: $(STAMP)
	$(BIN)/pytest tests/infra

test-e2e: $(STAMP) browser
	$(BIN)/pytest tests/e2e

lint: $(STAMP) checkov
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# checkov, a second scanner beside cdk-nag, on every stage's synthesized template: it fails on any
# finding not skipped, with its reason, in the resource's metadata (infra/common.py checkov_skip).
# It has a virtual environment of its own because it pins boto3 and botocore far below the
# project's (1.35 against 1.43); infra/checkov-requirements.txt pins it and all it needs.
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
STAGES := dev prod

$(CHECKOV_STAMP): infra/checkov-requirements.txt
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check -r infra/checkov-requirements.txt
	touch $(CHECKOV_STAMP)

checkov: $(STAMP) $(CHECKOV_STAMP)
	@for stage in $(STAGES); do \
		rm -rf build/synth/$$stage && \
		CDK_OUTDIR=build/synth/$$stage $(BIN)/python -m infra.app -c stage=$$stage && \
		$(CHECKOV_VENV)/bin/checkov --framework cloudformation --quiet --compact --skip-download \
			-f build/synth/$$stage/Tidings-$$stage.template.json || exit 1; \
	done

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

demo: $(STAMP)
	$(BIN)/tidings demo

# Synthesizes the CDK app with Python alone (no CDK CLI, no Docker): `make synth STAGE=prod`.
# The layers are built by `make install`, so synth itself needs no network.
STAGE ?= dev
synth: $(STAMP)
	CDK_OUTDIR=cdk.out $(BIN)/python -m infra.app -c stage=$(STAGE)
	$(BIN)/cfn-lint cdk.out/*.template.json

# Every benchmark; each prints a JSON line with its ratio against a baseline of the same run.
bench: $(STAMP)
	$(BIN)/python bench/claim.py
	$(BIN)/python bench/sender.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/percentiles.py
	$(BIN)/python bench/e2e.py
	$(BIN)/python bench/isolation.py

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) cdk.out build .pytest_cache .mypy_cache .ruff_cache
