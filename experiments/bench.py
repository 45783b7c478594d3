"""Speed and memory of every arm in the LRA text configuration: ``python experiments/bench.py``.

A thin wrapper around ``repro.cli.bench`` (installed as ``lra-bench``); ``--help`` lists the options.
Needs the checkout installed (``pip install -e .``).
"""

import sys

try:
    from repro.cli import bench
except ModuleNotFoundError as err:
    if err.name != "repro":
        raise
    print(
        "experiments/bench.py: cannot import the repro package: run `pip install -e .` in this checkout",
        file=sys.stderr,
    )
    sys.exit(2)

if __name__ == "__main__":
    bench.main(script=__file__)
