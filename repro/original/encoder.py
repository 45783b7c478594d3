"""The LRA Transformer encoder as a backbone: per layer an attention mixer and a feed-forward mixer.

LRA's encoder block (``lra_benchmarks/models/transformer/transformer.py``,
``TransformerBlock``; every efficient model's block has the same layout)::

    x = x + dropout(attention(LayerNorm(x)))            # pre-LayerNorm
    x = x + dropout(Dense(d_model)(dropout(gelu(Dense(mlp_dim)(LayerNorm(x))))))

followed, after the last layer, by a final ``LayerNorm`` (``encoder_norm``). So each
block is two pre-norm residual sublayers (``model.prenorm: true``): the attention
mixer and :class:`FeedForward` (LRA's ``common_layers.MlpBlock``: Dense ->
gelu -> dropout -> Dense; the dropout after the second Dense is the residual
sublayer's). ``nn.gelu`` in Flax is ``jax.nn.gelu`` with ``approximate=True``, hence
``activation: gelu_tanh`` in the LRA arms.

``build_lra_layers(cfg, max_len)`` reads from the model config: ``attention`` (a name in
``repro.original.attention.ATTENTION``, or in the table ``mechanisms`` names), ``attention_params``
(keyword arguments of that mixer), ``d_model`` (LRA ``emb_dim``), ``qkv_dim`` (LRA ``qkv_dim``, default
``d_model``), ``n_heads``, ``depth`` (LRA ``num_layers``), ``d_ff`` (LRA ``mlp_dim``),
``activation``, ``dropout`` and ``attention_dropout``; ``max_len`` (from
``repro.models.model.Encoder``) is the length of the states, CLS included.

Per-layer seeds: a mixer whose constructor takes ``seed`` (BigBird's random blocks)
gets ``attention_params.seed + layer index`` (default offset 0), as LRA draws
BigBird's random connectivity with ``connectivity_seed`` = the layer index.

``qkv_dim`` different from ``d_model`` (LRA's image and Pathfinder configs, e.g.
``emb_dim=128, qkv_dim=64``): the mixer is built at width ``qkv_dim`` (heads of
``qkv_dim // n_heads``) and the projections that meet the residual stream are
refitted: q/k/v (and any other input projection: Longformer's global q/k/v,
Synthesizer's dense hidden layer) map ``d_model -> qkv_dim`` and the output
projection ``qkv_dim -> d_model``, each Xavier-uniform with LRA's fan-in/fan-out
(Flax ``DenseGeneral`` flattens ``[d_model, heads, head_dim]`` to
``[d_model, qkv_dim]`` for its initialiser).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from ..models.mixer import BACKBONES, TokenMixer
from ..models.settings import encoder_setting
from ..registry import Registry
from .attention import HeadedMixer, QKVOut, load_all

ACTIVATIONS = {
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # jax.nn.gelu's default, LRA's MlpBlock
    "gelu": lambda: nn.GELU(),
    "relu": lambda: nn.ReLU(),
}


def _xavier(d_in: int, d_out: int, bias: bool) -> nn.Linear:
    layer = nn.Linear(d_in, d_out, bias=bias)
    nn.init.xavier_uniform_(layer.weight)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


class FeedForward(TokenMixer):
    """LRA's ``MlpBlock`` as a token mixer: Linear(d_model, d_ff) -> activation -> dropout -> Linear(d_ff, d_model).

    Xavier-uniform kernels and zero biases (LRA: ``bias_init=normal(1e-6)``). Acts on
    each position alone, so padding never reaches a real token through it.
    """

    RELEASE_ZERO_MASK = "ignored"  # position-wise: no mask to apply (repro.models.model.release_mask_use)
    packable = True  # position-wise: the packed stream's slots are positions like any other

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu_tanh", dropout: float = 0.0):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r}: choose one of {', '.join(ACTIVATIONS)}")
        self.fc1 = _xavier(d_model, d_ff, bias=True)
        self.act = ACTIVATIONS[activation]()
        self.drop = nn.Dropout(dropout)
        self.fc2 = _xavier(d_ff, d_model, bias=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.fc1(x))))

    def forward_packed(self, x: torch.Tensor, packed) -> torch.Tensor:
        return self.forward(x)


def _refit_fused_qkv(proj: QKVOut, d_model: int, qkv_dim: int) -> None:
    fused = nn.Linear(d_model, 3 * qkv_dim, bias=proj.qkv.bias is not None)
    with torch.no_grad():
        for w in fused.weight.chunk(3, dim=0):
            nn.init.xavier_uniform_(w)
        if fused.bias is not None:
            fused.bias.zero_()
    proj.qkv = fused
    if proj.out is not None:
        proj.out = _xavier(qkv_dim, d_model, proj.out.bias is not None)


def widen_projections(mixer: nn.Module, d_model: int, qkv_dim: int) -> nn.Module:
    """Make a mixer built at width ``qkv_dim`` read and write a ``d_model`` residual stream."""
    refitted = 0
    for module in mixer.modules():
        if isinstance(module, QKVOut):  # softmax-attention mixers (and Longformer's global q/k/v)
            _refit_fused_qkv(module, d_model, qkv_dim)
            refitted += 1
    if isinstance(mixer, HeadedMixer):
        for name in ("q_proj", "k_proj", "v_proj"):
            layer = getattr(mixer, name)
            if layer is not None:
                setattr(mixer, name, _xavier(d_model, qkv_dim, layer.bias is not None))
        mixer.out_proj = _xavier(qkv_dim, d_model, mixer.out_proj.bias is not None)
        if getattr(mixer, "dense_hidden", None) is not None:  # Synthesizer "dense" reads x itself
            mixer.dense_hidden = _xavier(d_model, qkv_dim, mixer.dense_hidden.bias is not None)
        refitted += 1
    if not refitted:
        raise TypeError(
            f"{type(mixer).__name__}: qkv_dim != d_model is supported only for mixers built on QKVOut or HeadedMixer"
        )
    return mixer


@BACKBONES.register("lra_transformer")
def build_lra_layers(cfg: dict, max_len: int, mechanisms: Registry | None = None) -> list[TokenMixer]:
    """[attention, feed-forward] per layer, ``cfg['depth']`` layers (see the module docstring); the attention
    is looked up in ``mechanisms`` when given (the benchmark's peers), else in the attention registry."""
    cls = (load_all() if mechanisms is None else mechanisms).get(cfg["attention"])
    d_model, n_heads = int(cfg["d_model"]), int(cfg["n_heads"])
    qkv_dim = int(cfg.get("qkv_dim") or d_model)
    if qkv_dim % n_heads:
        raise ValueError(f"qkv_dim={qkv_dim} is not divisible by n_heads={n_heads}")
    params = dict(cfg.get("attention_params") or {})
    takes_seed = "seed" in inspect.signature(cls).parameters
    seed_offset = int(params.pop("seed", 0)) if takes_seed else 0
    layers: list[TokenMixer] = []
    # The release's Reformer takes its width from its input, whatever qkv_dim says (reformer_attention.py)
    width = d_model if params.get("release") and cls.RELEASE_WIDTH_IS_INPUT else qkv_dim
    for index in range(int(cfg["depth"])):
        extra = {"seed": seed_offset + index} if takes_seed else {}
        mixer = cls(
            d_model=width,
            n_heads=n_heads,
            max_len=max_len,
            dropout=float(cfg.get("attention_dropout", 0.0)),
            **params,
            **extra,
        )
        if width != d_model:
            widen_projections(mixer, d_model, width)
        layers.append(mixer)
        layers.append(
            FeedForward(d_model, int(cfg["d_ff"]), cfg.get("activation", "gelu_tanh"), encoder_setting(cfg, "dropout"))
        )
    return layers
