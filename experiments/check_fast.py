"""Check and time the fast paths on a GPU, and measure the bounded-conv implementations; one command each::

    python experiments/check_fast.py paths      # the fast attention paths against their plain paths, per layer
    python experiments/check_fast.py sequence   # lra_reformer, s5 and mega: fast against plain, whole model
    python experiments/check_fast.py variants   # time every fast variant of the slow arms (fast_defaults.py)
    python experiments/check_fast.py conv --out bench_conv.json   # every conv impl per shape, the bf16 peak

``python experiments/check_fast.py COMMAND --help`` lists a command's options; each command's module
(``repro/bench/fast_paths.py``, ``fast_sequence.py``, ``fast_variants.py``, ``conv_impls.py``) says what it
checks and times. Needs the checkout installed (``pip install -e .``).
"""

import sys

try:
    from repro.bench import conv_impls, fast_paths, fast_sequence, fast_variants
    from repro.cli import dispatch
except ModuleNotFoundError as err:
    if err.name != "repro":
        raise
    print(
        "experiments/check_fast.py: cannot import the repro package: run `pip install -e .` in this checkout",
        file=sys.stderr,
    )
    sys.exit(2)

COMMANDS = {
    "paths": fast_paths.paths_main,
    "sequence": fast_sequence.sequence_main,
    "variants": fast_variants.variants_main,
    "conv": conv_impls.conv_main,
}


def main(argv: list[str] | None = None) -> int:
    return dispatch("check_fast.py", __doc__, COMMANDS, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
