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
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

demo: setup
	rm -rf $(RUN)
	$(BIN)/robot-rl record --task PickCube-v0 --policy scripted --episodes 5 --out $(RUN)/demos.zarr
	$(BIN)/robot-rl info $(RUN)/demos.zarr
	$(BIN)/robot-rl replay $(RUN)/demos.zarr --episode 0 --out $(RUN)/replay.mp4

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/sim.py

clean:
	rm -rf $(VENV) runs build *.egg-info
