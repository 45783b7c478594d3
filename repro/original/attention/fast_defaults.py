"""What ``auto`` runs, per mechanism: every fast variant's default in one table.

Each mechanism keeps its plain path and one or more fast variants that compute the same function
(the equivalence tests prove each against the plain path in float64 on CPU). A constructor option
set to ``"auto"`` (the default) reads its value here when the layer runs, so one edit switches
what every run and the benchmark use, e.g. after a GPU measurement
(``experiments/check_fast.py variants``)::

    FAST_DEFAULTS["bigbird"]["flex_block"] = 128

An explicit option (``model.attention_params.flex_block=64`` for an attention mixer,
``model.ssm_fft_layout=channels_last`` for S5, ...) overrides the table for one model.

Options, by mechanism:

* ``bigbird``, ``sparse``, ``longformer`` (``flex_attention`` backend, ``_flex.py``):
  ``flex_block`` (64 or 128: the side of the block mask's tiles; 64 fits BigBird's 64-wide blocks,
  so no tile needs the pattern evaluated inside it; with torch 2.11 on sm90 the backward kernel
  has no default configuration for 64-wide tiles and is compiled with max-autotune),
  ``flex_narrow_min_len`` (table only: an ``auto`` tile side of 64 applies from this sequence
  length on; shorter sequences run 128-wide tiles),
  ``flex_global_rows`` (``flex``: the global query rows inside the flex call; ``dense``: computed
  apart over all keys, as the blockwise backend does, which leaves the flex call their tiles),
  ``flex_lse_pass`` (``full``: the dropout's second pass, for its log-normaliser, runs with the
  values; ``narrow``: with a 16-wide zero value tensor, the same log-normaliser and gradients for
  about a third less work), ``dense_max_len`` (table only: ``backend=auto`` runs the dense backend,
  the whole pattern as the mask of one ``scaled_dot_product_attention`` call, up to this many
  tokens, flex above; 0: never).
* ``sinkhorn``: ``sdpa_min_len`` (``backend=auto`` runs SDPA from this sequence length on, the
  materialised path below it), ``sdpa_mask`` (``bias``: masked keys as a float ``attn_mask``, which
  rules out the flash kernel; ``fold``: the key mask folded into one extra query/key feature, no
  ``attn_mask``), ``balance`` (``eager`` or ``compiled``: the Sinkhorn iterations through
  ``torch.compile``, a few fused kernels instead of hundreds of small ones), ``attend`` (``eager`` or
  ``compiled``: the whole block attention through ``torch.compile``).
* ``reformer``: ``windows`` (``concat``: each chunk's keys as its own chunk concatenated with the
  previous one, a copy; ``unfold``: overlapping views of the sorted sequence, no copy),
  ``gather`` (``per_tensor``: q, keys and values gathered one by one; ``fused``: one row gather of
  the concatenated [q | v], keys normalised after), ``sdpa_backends`` (None: torch picks;
  or a tuple of ``torch.nn.attention.SDPBackend`` names tried in order).
* ``mega``: ``attention_impl`` (``sdpa`` or ``flex``: ``flex_attention`` with the relative bias
  added in a score_mod, its gradient accumulated in the kernel, no dense [L, L] bias),
  ``flex_value_split`` (the value width is cut into this many flex calls: 256-wide values
  need register room a 64-wide query does not), ``flex_kernel_options`` (passed to flex_attention).
* ``linformer``: ``sdpa_min_k`` (``backend=auto`` runs ``sdpa`` when the projected length ``k`` is
  at least this, ``materialized`` below it; ``sdpa``: ``scaled_dot_product_attention`` over the
  ``k`` projected keys, a fused kernel that holds no probabilities; ``materialized``: the
  ``[B, H, L, k]`` logits, softmax and dropout written out), ``attend`` (``eager`` or ``compiled``:
  the attention after the input projections through ``torch.compile``).
* ``s5``: ``fft_layout`` (``time_major``: the FFT along axis 1 of [B, L, P/2]; ``channels_last``:
  states laid out [B, P/2, L] so every FFT runs over the contiguous last axis),
  ``proj_dtype`` (``float32`` or ``autocast``: the input and output projections around the FFT in
  the autocast dtype, like every other linear layer; the FFT and the states stay float32).

The values below are the fastest measured on an H200 with torch 2.11 that also ran at every task
length (paper/performance.md); ``experiments/check_fast.py variants`` measures every variant.
"""

from __future__ import annotations

FAST_DEFAULTS: dict[str, dict] = {
    # BigBird: 64-wide tiles (its block width; no tile is partial). With the inputs padded to whole
    # tiles they compiled and trained at ListOps' 2,001 tokens on an H200 (torch 2.11): 14.4 steps/s in
    # the seed-0 record (results/v0.2-lra/runs/lra_bigbird/listops/paper/seed0) against 3.4 on 128-wide
    # tiles (paper/performance.md). Sparse: 64-wide tiles still hit an illegal
    # memory access while compiling at that length (its gathered key axis), so it keeps 128.
    # BigBird below 1,536 tokens: at text's 1,001 the 64-wide tiles' max-autotune compilation hit an
    # illegal memory access in a candidate kernel it benchmarked ("Runtime error during autotuning",
    # H200, torch 2.11), while 128-wide tiles trained at 33 steps/s (blockwise path 30; 50 steps
    # timed after 200, LRA text model, batch 32), so 64-wide tiles run from 1,536 tokens on.
    # The dense backend (one SDPA call, the pattern as its mask) up to dense_max_len tokens, training
    # steps/s against flex on an H200 (paper/performance.md): text at 1,025 tokens BigBird 1.07x (inside
    # the flex row's spread), Sparse 1.44x, Longformer 1.43x; image (1,024, batch 256) 1.24x, 1.14x and
    # 0.91x; ListOps (2,001) 0.69x, 0.90x, 0.59x; text from 2,049 on slower for all three. Longformer
    # stays on flex: its image cell is its longest (0.91x), and its text cell is short.
    "bigbird": {
        "flex_block": 64,
        "flex_narrow_min_len": 1536,
        "flex_global_rows": "dense",
        "flex_lse_pass": "narrow",
        "dense_max_len": 1025,
    },
    "sparse": {"flex_block": 128, "flex_global_rows": "dense", "flex_lse_pass": "narrow", "dense_max_len": 1025},
    # Longformer: 128-wide tiles. 64-wide ones train its narrow-headed image and Pathfinder configurations
    # 1.15x as fast, but their compilation failed on one H200 host (paper/performance.md), so they stay an
    # explicit option (model.attention_params.flex_block=64).
    "longformer": {"flex_block": 128, "flex_global_rows": "flex", "flex_lse_pass": "narrow", "dense_max_len": 0},
    # Sinkhorn's attend compiled: training steps/s 1.36-1.37x the eager attend at 4K and 1.20-1.77x at 1K
    # in two benchmark runs on H200s (torch 2.11, sync_every=5; paper/performance.md, Sinkhorn's note), and a
    # text run at its 1,001 tokens trained through it (1.03x the examples/s of the eager one).
    "sinkhorn": {"sdpa_min_len": 0, "sdpa_mask": "fold", "balance": "compiled", "attend": "compiled"},
    "reformer": {"windows": "unfold", "gather": "fused", "sdpa_backends": None},
    "mega": {
        "attention_impl": "flex",
        "flex_value_split": 1,
        "flex_kernel_options": {
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "num_warps": 8,
            "num_stages": 2,
            "BLOCK_M1": 32,
            "BLOCK_N1": 64,
            "BLOCK_M2": 64,
            "BLOCK_N2": 32,
        },
    },
    "s5": {"fft_layout": "channels_last", "proj_dtype": "autocast"},
    # Linformer: backend=auto is sdpa from k = sdpa_min_k on. H200, torch 2.11, LRA text model, batch 32,
    # bf16, training steps/s: k=16 (LRA's) at 4K, materialised 1.7x sdpa (33.08 against 19.22); k=256
    # (peer_linformer), sdpa 0.97x materialised at 1K, 1.39-1.44x at 2K-4K, and 0.65x the peak memory.
    # attend compiled: 1.10-1.25x the eager attend at 1K-4K (k = 256) in one H200 run, with fewer kernel
    # launches and less kernel time a step (paper/performance.md, "Linformer's compiled attend").
    "linformer": {"sdpa_min_k": 256, "attend": "compiled"},
}

# The values each option accepts besides "auto" (constructor arguments are checked against them).
CHOICES: dict[str, dict[str, tuple]] = {
    "bigbird": {"flex_block": (64, 128), "flex_global_rows": ("flex", "dense"), "flex_lse_pass": ("full", "narrow")},
    "sparse": {"flex_block": (64, 128), "flex_global_rows": ("flex", "dense"), "flex_lse_pass": ("full", "narrow")},
    "longformer": {"flex_block": (64, 128), "flex_global_rows": ("flex",), "flex_lse_pass": ("full", "narrow")},
    "sinkhorn": {"sdpa_mask": ("bias", "fold"), "balance": ("eager", "compiled"), "attend": ("eager", "compiled")},
    "reformer": {"windows": ("concat", "unfold"), "gather": ("per_tensor", "fused")},
    "mega": {"flex_value_split": (1, 2, 4)},
    "s5": {"fft_layout": ("time_major", "channels_last"), "proj_dtype": ("float32", "autocast")},
    "linformer": {"backend": ("sdpa", "materialized"), "attend": ("eager", "compiled")},
}


def check_choice(mechanism: str, option: str, value, key: str | None = None):
    """``value`` if it is ``"auto"`` or one of the option's choices; else a ValueError naming the
    config key (``key``, default ``option``) and the valid values."""
    valid = CHOICES[mechanism][option]
    if value == "auto" or value in valid:
        return value
    names = ", ".join(repr(v) for v in ("auto", *valid))
    raise ValueError(f"{mechanism}: {key or option}={value!r} is not one of {names}")


def check_at_least(mechanism: str, option: str, value, minimum: int, noun: str):
    """``value`` if it is ``"auto"`` or an int of at least ``minimum`` (a threshold such as a length);
    else a ValueError naming the config key ``attention_params.<option>``."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
        return value
    raise ValueError(f"{mechanism}: attention_params.{option}={value!r} is not auto or {noun} >= {minimum}")


def choose(mechanism: str, option: str, value):
    """The value ``auto`` stands for (``FAST_DEFAULTS``), or ``value`` itself."""
    return FAST_DEFAULTS[mechanism][option] if value == "auto" else value
