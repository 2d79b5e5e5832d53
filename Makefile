.PHONY: setup demo test bench

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/proctor demo

test:
	@PROCTOR_EXTRAS=test,serve,view,trainers,plots,ray bash scripts/setup.sh
	@.venv/bin/python -m pytest -q

bench:
	@PROCTOR_EXTRAS=serve,view,ray bash scripts/setup.sh
	@.venv/bin/python bench/sandbox.py
	@.venv/bin/python bench/tools_custody.py
	@.venv/bin/python bench/rollout.py
	@.venv/bin/python bench/pool.py
	@.venv/bin/python bench/ray_batch.py
	@.venv/bin/python bench/ray_episode.py
	@.venv/bin/python bench/gvisor.py
	@.venv/bin/python bench/fake_backend.py
	@.venv/bin/python bench/server.py
	@.venv/bin/python bench/syscall_filter.py
	@.venv/bin/python bench/telemetry.py
	@.venv/bin/python bench/planted_scan.py
	@.venv/bin/python bench/covert.py
	@.venv/bin/python bench/images.py
	@.venv/bin/python bench/viewer.py
	@.venv/bin/python bench/report.py
