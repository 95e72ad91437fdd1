# robot_rl: `make demo` sets up and runs the main job, `make test` sets up and runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN ?= runs/demo

.PHONY: setup demo test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "robot_rl needs Python 3.11 (the CPU torch wheel is cp311)"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test,ros]'
	touch $@

demo: setup
	rm -rf $(RUN)
	$(BIN)/robot-rl train --task PickCube-v0 --obs-mode state --demos 20 --steps 1500 --eval-every 500 \
		--eval-episodes 10 --run-dir $(RUN)
	@echo "report: $(RUN)/report.md  curve: $(RUN)/learning_curve.png  video: $(RUN)/eval.mp4"

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/sim.py

clean:
	rm -rf $(VENV) runs build *.egg-info
