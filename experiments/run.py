"""Train an arm on a task: ``python experiments/run.py arm=locality_k61 task=listops profile=smoke``.

A thin wrapper around ``repro.cli.run`` (installed as ``lra-run``); ``--help`` lists the options.
Needs the checkout installed (``pip install -e .``).
"""

import sys

try:
    from repro.cli import run
except ModuleNotFoundError as err:
    if err.name != "repro":
        raise
    print(
        "experiments/run.py: cannot import the repro package: run `pip install -e .` in this checkout", file=sys.stderr
    )
    sys.exit(2)

if __name__ == "__main__":
    run.main(script=__file__)
