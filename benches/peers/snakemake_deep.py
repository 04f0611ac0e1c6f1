"""Snakemake with a higher Python recursion limit.

Snakemake 9 builds its DAG recursively: a chain deeper than ~500 rules stops with
"RecursionError: maximum recursion depth exceeded". bench.py retries such a project through this
wrapper and marks the numbers. Usage: python snakemake_deep.py [snakemake args...]
"""

import sys
import threading

sys.setrecursionlimit(100_000)
threading.stack_size(512 * 1024 * 1024)  # the C stack grows with deep pure-Python recursion too


def run():
    from snakemake.cli import main

    try:
        main()
    except SystemExit as e:
        run.code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


run.code = 0
t = threading.Thread(target=run)
t.start()
t.join()
sys.exit(run.code)
