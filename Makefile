# robot_rl: `make demo` sets up and runs the main job, `make test` sets up and runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN ?= runs/demo
# The demo's budget (override for a quick run, e.g. `make demo DEMO_STEPS=200 DEMO_EVAL_EVERY=100`).
DEMO_DEMOS ?= 20
DEMO_STEPS ?= 1500
DEMO_EVAL_EVERY ?= 500
DEMO_EVAL_EPISODES ?= 10

.PHONY: setup demo test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "robot_rl needs Python 3.11 (the CPU torch wheel is cp311)"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test,ros]'
	touch $@

demo: setup
	rm -rf $(RUN)
	$(BIN)/robot-rl train --task PickCube-v0 --obs-mode state --demos $(DEMO_DEMOS) --steps $(DEMO_STEPS) \
		--eval-every $(DEMO_EVAL_EVERY) --eval-episodes $(DEMO_EVAL_EPISODES) --run-dir $(RUN)
	@echo "report: $(RUN)/report.md  curves: $(RUN)/learning_curve.png $(RUN)/training_curves.png" \
		"video: $(RUN)/eval.mp4  policy: $(RUN)/policy.msgpack"

# Two workers: the ROS 2 tests on one, one at a time, the rest beside them (tests/conftest.py).
test: setup
	$(BIN)/python -m pytest -n 2 --dist loadfile

bench: setup
	$(BIN)/python bench/sim.py

clean:
	rm -rf $(VENV) runs build *.egg-info
