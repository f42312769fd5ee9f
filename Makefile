# Two entry points for a fresh clone: `make demo` and `make test`.
# Each creates .venv (NumPy, pytest, the CPU build of torch==2.13.0, tqdm,
# scikit-learn, matplotlib) when missing.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test,examples,ray,gpu]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/neoflow demo

test: $(STAMP)
	$(PY) -m pytest -n 2 -q

test-fast: $(STAMP)
	$(PY) -m pytest -n 2 -q -m "not slow"

bench: $(STAMP)
	$(PY) bench/ops.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
