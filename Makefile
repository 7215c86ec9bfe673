# The whole gate is `make check`; `make test` and `make demo` set themselves up on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION ?= 20

.PHONY: install browser test test-unit test-unit-py312 test-integration test-infra test-e2e lint checkov typecheck check demo wheel wheel-demo synth bench clean

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

# Every tier on one worker per core (pytest-xdist): each worker starts its own embedded PostgreSQL
# and clones its own databases, so tests share nothing but the machine. TEST_WORKERS=0 runs them
# in this process.
TEST_WORKERS ?= auto

# loadgroup: a module whose tests build on each other's data (xdist_group) runs on one worker.
test: $(STAMP) browser
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit

# The unit tier again on Python 3.12, which the Lambda functions run (infra/functions.py RUNTIME),
# in a virtual environment of its own holding only what that tier imports (the package's runtime
# dependencies and the unit-tests extra). Python 3.12 is PYTHON312 when given, else pyenv's newest
# 3.12, else python3.12 on PATH.
PY312_VENV := .venv-py312
PY312_STAMP := $(PY312_VENV)/.installed

$(PY312_STAMP): pyproject.toml
	@python312="$(PYTHON312)"; \
	if [ -z "$$python312" ] && command -v pyenv >/dev/null 2>&1; then \
		python312=$$(ls -d "$$(pyenv root)"/versions/3.12.*/bin/python 2>/dev/null | sort -V | tail -n 1); \
	fi; \
	if [ -z "$$python312" ]; then python312=$$(command -v python3.12 || true); fi; \
	if [ -z "$$python312" ] || ! "$$python312" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then \
		echo "Python 3.12 not found (looked for PYTHON312, pyenv's 3.12.*, python3.12 on PATH):" \
			"install it (pyenv install 3.12) or name it: make test-unit-py312 PYTHON312=/path/to/python3.12" >&2; \
		exit 1; \
	fi; \
	echo "$(PY312_VENV): $$("$$python312" --version) ($$python312)"; \
	rm -rf $(PY312_VENV) && "$$python312" -m venv $(PY312_VENV)
	$(PY312_VENV)/bin/pip install --quiet --upgrade pip
	$(PY312_VENV)/bin/pip install --quiet '.[unit-tests]'
	touch $(PY312_STAMP)

test-unit-py312: $(PY312_STAMP)
	$(PY312_VENV)/bin/python -m pytest tests/unit

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

# The wheel and the source distribution, in dist/ (the wheel is built from the source
# distribution, so both hold everything): pip install dist/tidings-*.whl, or with [local].
wheel: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --quiet --outdir dist .

# The wheel as a user installs it: with its local extra, into a new virtual environment outside
# the repository, then `tidings demo` from an empty folder, so that the handlers, the SQL and the
# portal's files can only come from the installed package.
wheel-demo: wheel
	@scratch=$$(mktemp -d) && trap 'rm -rf "$$scratch"' EXIT && \
	$(PYTHON) -m venv "$$scratch/venv" && \
	"$$scratch/venv/bin/pip" install --quiet "$$(ls $(CURDIR)/dist/tidings-*.whl)[local]" && \
	mkdir "$$scratch/elsewhere" && cd "$$scratch/elsewhere" && \
	echo "tidings demo --events 200 in $$PWD, tidings from $$scratch/venv" && \
	"$$scratch/venv/bin/tidings" demo --events 200

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
	$(BIN)/python bench/transport.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/percentiles.py
	$(BIN)/python bench/statements.py
	$(BIN)/python bench/e2e.py
	$(BIN)/python bench/isolation.py

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(PY312_VENV) cdk.out build dist .pytest_cache .mypy_cache .ruff_cache
