"""One encoder for every backbone: embedding, residual sublayers, final norm, shared heads.

A backbone is a list of token mixers ``mixer(x [B,L,D], mask [B,L]) -> [B,L,D]``;
each is wrapped in the same residual sublayer (pre- or post-norm). Backbones
register themselves by name in ``BACKBONES`` (``mixer.py``); their modules are imported on
first use, so importing this module builds nothing. A builder is called as
``builder(cfg, max_len=...)``: the model config, and the length of the states the
mixers see (the task's length, plus one with ``cls_token``), which comes from the
data, never from the model config.

Every mixer is a ``TokenMixer`` (``mixer.py``), whose typed fields say what it supports; its
``record_info()`` reports facts for the run record (name -> values, e.g. the convolution
implementations that ran), which ``collect_record_info`` merges over the model.

``cls_token: true`` prepends a learned vector (zero-initialised) to the embedded
tokens before the positional embedding, as LRA's encoders do for
``classifier_pool='CLS'`` (``lra_benchmarks/models/transformer/transformer.py``):
the CLS token takes position 0, the positional table has ``max_len + 1`` rows,
and its mask entry is the first token's (``mask[:, :1]``, as in LRA).
"""

from __future__ import annotations

import importlib
import math
import pkgutil

import torch
from torch import nn

from ..registry import Registry
from .heads import OneTowerHead, TwoTowerHead
from .mixer import BACKBONES, BackboneBuilder, TokenMixer
from .packing import PackedBatch, capacity_for, pack, plan_packing, unpack
from .settings import EncoderSettings

BACKBONE_PACKAGES = ("repro.original", "repro.followup")  # the packages whose modules register backbones


def load_backbones() -> Registry[BackboneBuilder]:
    """Import every module of the backbone packages (each builder module registers its own) and return the table."""
    for package in BACKBONE_PACKAGES:
        for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"{package}.{module.name}")
    return BACKBONES


def get_backbone(name: str) -> BackboneBuilder:
    """The builder registered as ``name`` (a model config's ``backbone``); an unknown name lists the known ones."""
    return load_backbones().get(name)


def sinusoidal_table(length: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Vaswani et al.'s sinusoidal positions [length, dim] (base frequency as rotary's, the follow-up study, A.2)."""
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    inv_freq = torch.exp(-math.log(base) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table.float()


TOKEN_ENCODINGS = ("embedding", "intensity")


class Embedding(nn.Module):
    """Token encoding plus an optional summed positional embedding (none | learned | sinusoidal).

    ``token_encoding``: ``embedding`` (a learned vector per token id: LRA and the follow-up)
    or ``intensity`` (pixel tasks only: the id read as an intensity, ``id / (vocab_size - 1)``
    in [0, 1], mapped by one linear layer, as S4's and S5's LRA image pipelines encode pixels;
    nearby intensities start with nearby vectors instead of 256 unrelated ones).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int,
        positional: str = "none",
        base: float = 10000.0,
        token_encoding: str = "embedding",
    ):
        super().__init__()
        if token_encoding not in TOKEN_ENCODINGS:
            raise ValueError(f"model.token_encoding={token_encoding!r}: choose one of {', '.join(TOKEN_ENCODINGS)}")
        self.d_model = d_model
        self.token_encoding = token_encoding
        self.intensity_scale = 1.0 / max(vocab_size - 1, 1)
        self.tokens = nn.Embedding(vocab_size, d_model) if token_encoding == "embedding" else nn.Linear(1, d_model)
        self.positional = positional
        if positional == "learned":
            self.positions = nn.Parameter(torch.randn(max_len, d_model) * 0.02)
        elif positional == "sinusoidal":
            self.register_buffer("positions", sinusoidal_table(max_len, d_model, base), persistent=False)
        elif positional != "none":
            raise ValueError(f"positional {positional!r}: choose none, learned or sinusoidal")

    def forward(self, ids: torch.Tensor, prefix: torch.Tensor | None = None) -> torch.Tensor:
        """Token (+ positional) embeddings [B, L, D]; ``prefix`` [1, P, D] is prepended before positions are added."""
        if self.token_encoding == "intensity":
            # In float32 like an embedding lookup (autocast would run an nn.Linear in bf16 and
            # carry bf16 down the residual stream): bias + (id / 255) * weight.
            scaled = ids.unsqueeze(-1).float() * self.intensity_scale
            x = torch.addcmul(self.tokens.bias, scaled, self.tokens.weight[:, 0])
        else:
            x = self.tokens(ids)
        if prefix is not None:
            x = torch.cat([prefix.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)
        if self.positional != "none":
            x = x + self.positions[: x.shape[1]]
        return x


NORMS = ("layer", "batch")


class TokenBatchNorm(nn.Module):
    """Batch norm of token states [B, L, D]: per channel, statistics over batch and positions.

    S4's, S5's and MEGA's LRA configurations normalise with batch norm on the pixel tasks
    (image, Pathfinder) and with layer norm on text. Statistics include every position, so
    it is only built for tasks without padding (``SequenceClassifier`` refuses the others).
    """

    def __init__(self, d_model: int):
        super().__init__()
        self.bn = nn.BatchNorm1d(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x.transpose(1, 2)).transpose(1, 2)


def make_norm(kind: str, d_model: int) -> nn.Module:
    """``layer`` (LRA, the follow-up: per token) or ``batch`` (per channel over batch and positions)."""
    if kind == "layer":
        return nn.LayerNorm(d_model)
    if kind == "batch":
        return TokenBatchNorm(d_model)
    raise ValueError(f"model.norm={kind!r}: choose one of {', '.join(NORMS)}")


class ResidualSublayer(nn.Module):
    """``x + drop(mixer(norm(x)))`` (pre-norm) or ``norm(x + drop(mixer(x)))`` (post-norm)."""

    def __init__(
        self, mixer: TokenMixer, d_model: int, prenorm: bool = True, dropout: float = 0.0, norm: str = "layer"
    ):
        super().__init__()
        self.mixer = mixer
        self.norm = make_norm(norm, d_model)
        self.prenorm = prenorm
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, shared: object = None) -> torch.Tensor:
        """``shared``: the structure the mixer's ``shared_padding`` names, built once by the encoder."""
        if self.prenorm:
            return x + self.drop(self.mix(self.norm(x), mask, shared))
        return self.norm(x + self.drop(self.mix(x, mask, shared)))

    def mix(self, x: torch.Tensor, mask: torch.Tensor | None, shared: object) -> torch.Tensor:
        return self.mixer(x, mask) if shared is None else self.mixer(x, mask, shared)

    def forward_packed(self, x: torch.Tensor, packed: PackedBatch) -> torch.Tensor:
        """The same sublayer on a packed stream [1, C, D] (``repro/models/packing.py``)."""
        if self.prenorm:
            return x + self.drop(self.mixer.forward_packed(self.norm(x), packed))
        return self.norm(x + self.drop(self.mixer.forward_packed(x, packed)))


def release_mask_use(mixer: TokenMixer) -> bool:
    """Under ``model.release_masking``: does ``mixer`` get the ``(ids > 0)`` mask? As in the LRA release,
    whose encoders all pass ``(inputs > 0)`` to their attention (padding on text and ListOps, black pixels
    on the pixel tasks): a mixer whose release code used it
    (``RELEASE_ZERO_MASK = "uniform_rows"``) is switched to the release's semantics, one whose release
    masking is this package's padding convention (``"padding"``: BigBird) gets the mask as padding, one
    whose release code ignored it (``"ignored"``: Linformer, Reformer, linear attention, Performer, the
    feed-forward layer) gets no mask; any other mixer is refused, naming what is implemented."""
    mode = mixer.RELEASE_ZERO_MASK
    if mode == "uniform_rows":
        mixer.release_masking = True
        return True
    if mode == "padding":  # the release's masking is this package's padding convention (BigBird)
        return True
    if mode == "ignored":
        return False
    raise ValueError(
        f"model.release_masking=true: {type(mixer).__name__} does not implement what the LRA release's "
        "attention did with its (inputs > 0) mask; it is implemented for lra_transformer, lra_bigbird, lra_local "
        "and lra_sinkhorn with attention_params.release=true, and the mechanisms whose release code ignores the "
        "mask (lra_linformer, lra_reformer, lra_linear, lra_performer): remove the setting or use one of those "
        "arms"
    )


@torch.compiler.disable
def build_shared(wants: list, source: object) -> dict[str, object]:
    """Each ``(name, build)`` of the mixers' ``shared_padding`` (``shared_packing``) built once from the
    padding mask (the ``PackedBatch``), ``name -> build(source)``; outside any compiled graph, so a compiled
    encoder breaks its graph here once, before its layers (a break inside the loop over the layers made
    dynamo give up on the whole loop)."""
    shared: dict[str, object] = {}
    for want in wants:
        if want is not None and want[0] not in shared:
            shared[want[0]] = want[1](source)
    return shared


@torch.compiler.disable
def prepare_packing(
    wants: list, mask: torch.Tensor, capacity: int, gap: int, counts: dict, expected: dict
) -> PackedBatch | None:
    """The packed layout of the batch ``mask`` marks, with each ``(name, build)`` of the mixers'
    ``shared_packing`` built once into its ``shared`` (``gap``: the empty slots the mixers need between two
    examples); None when the batch does not fit ``capacity``. ``expected["lengths"]``, when set
    (``SequenceClassifier.expect_lengths``), holds this batch's lengths on the host and is used up here.
    ``counts["packed"]`` or ``counts["padded"]`` counts the pass. Outside any compiled graph, as
    ``build_shared``: a compiled model breaks its graph here once a pass."""
    lengths, expected["lengths"] = expected["lengths"], None
    packed = plan_packing(mask, capacity, gap=gap, lengths=lengths)
    counts["padded" if packed is None else "packed"] += 1
    if packed is not None:
        packed.shared.update(build_shared(wants, packed))
    return packed


class Encoder(nn.Module):
    """Embedding -> residual sublayers -> final norm (pre-norm) -> token states [B, L, D].

    ``backbone``: the builder of the mixers, ``builder(cfg, max_len=...)``; by default the one
    ``BACKBONES`` holds under ``cfg["backbone"]`` (the benchmark passes its peers' builder)."""

    def __init__(self, cfg: dict, vocab_size: int, max_len: int, backbone: BackboneBuilder | None = None):
        super().__init__()
        settings = EncoderSettings.from_model_config(cfg)
        d_model, norm = settings.d_model, settings.norm
        make_norm(norm, d_model)  # an unknown kind fails here, before the backbone is built
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model)) if settings.cls_token else None
        seq_len = max_len + (1 if self.cls is not None else 0)
        self.embed = Embedding(
            vocab_size, d_model, seq_len, settings.positional, settings.positional_base, settings.token_encoding
        )
        self.embed_drop = nn.Dropout(settings.dropout)
        if "max_len" in cfg:
            raise ValueError(
                f"model.max_len={cfg['max_len']}: the sequence length comes from the task; "
                "remove it from the model config and set task.max_len"
            )
        mixers = (backbone or get_backbone(settings.backbone))(cfg, max_len=seq_len)
        for mixer in mixers:
            if not isinstance(mixer, TokenMixer):
                raise TypeError(
                    f"model.backbone={settings.backbone!r} built a {type(mixer).__name__}, which is not a token mixer: "
                    "derive it from repro.models.mixer.TokenMixer"
                )
        self.release_masking = bool(settings.release_masking)
        self.takes_mask = [release_mask_use(m) if self.release_masking else True for m in mixers]
        self.sublayers = nn.ModuleList(
            ResidualSublayer(m, d_model, settings.prenorm, settings.dropout, norm) for m in mixers
        )
        # model.final_norm: false leaves the pre-norm stack's output unnormalised (the follow-up's code)
        final = settings.prenorm and settings.final_norm
        self.final_norm = make_norm(norm, d_model) if final else nn.Identity()
        self.pack_fraction: float | None = None  # train.pack_sequences: the stream's share of the padded batch
        self.pack_counts = {"packed": 0, "padded": 0}  # forward passes with packing on, by how they ran
        self.pack_expected: dict = {"lengths": None}  # the next packed pass's lengths, from the host

    def packing_problem(self) -> str | None:
        """Why this encoder cannot run on packed sequences, one line (None: it can)."""
        mixers = [s.mixer for s in self.sublayers]
        # declared by the class itself: a subclass that computes something else does not inherit it
        if refused := sorted({type(m).__name__ for m in mixers if not type(m).__dict__.get("packable", False)}):
            return f"{', '.join(refused)} do not run on packed sequences (TokenMixer.packable)"
        if any(isinstance(m, nn.Dropout) and m.p for m in self.modules()):
            return "model.dropout > 0 would draw other dropout masks on the packed layout than on the padded one"
        if self.cls is not None:
            return "model.cls_token=true prepends one vector to the padded batch, not to each packed example"
        if self.release_masking:
            return "model.release_masking=true masks by token id, not by example"
        return None

    def state_mask(self, mask: torch.Tensor | None) -> torch.Tensor | None:
        """The padding mask aligned with the encoder's output states (CLS included)."""
        if self.cls is None or mask is None:
            return mask
        return torch.cat([mask[:, :1], mask], dim=1)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Token states [B, L, D] ([B, L + 1, D] with ``cls_token``, the CLS state first)."""
        x = self.embed_drop(self.embed(ids, self.cls))
        mask = self.state_mask(mask)
        if self.pack_fraction is not None and mask is not None:
            gap = max(s.mixer.packing_gap() for s in self.sublayers)
            capacity = capacity_for(mask.shape[0], mask.shape[1], self.pack_fraction, gap=gap)
            wants = [s.mixer.shared_packing(x.device) for s in self.sublayers]
            packed = prepare_packing(wants, mask, capacity, gap, self.pack_counts, self.pack_expected)
            if packed is not None:
                return self.forward_stream(x, packed)
        wants = [s.mixer.shared_padding(mask) if t and mask is not None else None
                 for s, t in zip(self.sublayers, self.takes_mask, strict=True)]  # fmt: skip
        # name -> the structure of the mask that mixers share, built once before the layers (one graph break)
        shared = build_shared(wants, mask) if any(w is not None for w in wants) else {}
        for sublayer, takes_mask, want in zip(self.sublayers, self.takes_mask, wants, strict=True):
            x = sublayer(x, mask if takes_mask else None, None if want is None else shared[want[0]])
        return self.final_norm(x)

    def forward_stream(self, x: torch.Tensor, packed: PackedBatch) -> torch.Tensor:
        """The embedded batch ``x`` [B, L, D] through the sublayers as the packed stream, back in the padded
        layout (padded positions 0; ``repro/models/packing.py``)."""
        h = pack(x, packed)
        for sublayer in self.sublayers:
            h = sublayer.forward_packed(h, packed)
        return unpack(self.final_norm(h), packed)


class SequenceClassifier(nn.Module):
    """Encoder + shared head; two towers (one shared encoder) for inputs [B, 2, L]."""

    def __init__(
        self,
        cfg: dict,
        vocab_size: int,
        max_len: int,
        num_classes: int,
        pad_id: int | None,
        two_tower: bool,
        combine: str | None = None,
        backbone: BackboneBuilder | None = None,
    ):
        super().__init__()
        settings = EncoderSettings.from_model_config(cfg)
        if settings.token_encoding == "intensity" and pad_id is not None:
            raise ValueError(
                f"model.token_encoding=intensity reads token ids as pixel intensities, but this task pads "
                f"with id {pad_id} (a vocabulary of symbols, not pixels): use model.token_encoding=embedding"
            )
        if settings.norm == "batch" and pad_id is not None:
            raise ValueError(
                f"model.norm=batch takes its statistics over every position, but this task pads with id {pad_id}: "
                "padding would enter them; use model.norm=layer"
            )
        self.encoder = Encoder(cfg, vocab_size, max_len, backbone)
        self.pad_id = pad_id
        self.two_tower = two_tower
        hidden = settings.head_hidden
        if hidden == "lra":
            # LRA's common_layers.classifier_head: Dense(mlp_dim) -> ReLU -> logits; the dual
            # (two-tower) head adds Dense(mlp_dim // 2) -> ReLU. mlp_dim is the FFN width d_ff.
            d_ff = int(cfg["d_ff"])
            hidden = [d_ff, d_ff // 2] if two_tower else [d_ff]
        head_args = dict(
            d_model=settings.d_model,
            num_classes=num_classes,
            pooling=settings.pooling,
            hidden=hidden,
            single_logit=bool(settings.single_logit),
        )
        combine = settings.two_tower_combine if combine is None else combine
        self.head = TwoTowerHead(**head_args, combine=combine) if two_tower else OneTowerHead(**head_args)

    def use_packing(self, fraction: float | None) -> None:
        """Run padded batches packed end to end in a stream of ``fraction`` of their positions
        (``train.pack_sequences``, ``train.pack_capacity``; ``repro/models/packing.py``), or, None, padded.
        Refused, in one line naming the setting, for a model whose function packing would change."""
        if fraction is None:
            self.encoder.pack_fraction = None
            return
        if not 0 < fraction <= 1:
            raise ValueError(f"train.pack_capacity={fraction}: give the stream's share of a padded batch, in (0, 1]")
        problem = self.encoder.packing_problem()
        if problem is None and self.pad_id is None:
            problem = "the task has no padding (every sequence is full length): there is nothing to pack"
        if problem is None and self.head.pooling not in ("mean", "max"):
            problem = (
                f"model.pooling={self.head.pooling} reads padded positions (an example without tokens, or every "
                "position), which a packed run leaves at 0; packing takes mean or max pooling"
            )
        if problem is not None:
            raise ValueError(f"train.pack_sequences=true: {problem}; set train.pack_sequences=false")
        self.encoder.pack_fraction = float(fraction)

    def expect_lengths(self, lengths: torch.Tensor | None) -> None:
        """The next forward pass's real tokens per example, on the host (the training loader's), so that a
        packed pass plans its layout without waiting for the device (``repro/models/packing.py``); it is
        checked against the pass's padding there. Ignored without packing or with two towers (their
        documents are packed one by one, and the loader's lengths are per example)."""
        if self.encoder.pack_fraction is not None and not self.two_tower:
            self.encoder.pack_expected["lengths"] = lengths

    def packing_info(self) -> dict | None:
        """For the run record: the stream's share and this process's forward passes packed and run padded (a
        batch over the capacity), None without packing."""
        if self.encoder.pack_fraction is None:
            return None
        return {
            "capacity": self.encoder.pack_fraction,
            **{f"{k}_passes": v for k, v in self.encoder.pack_counts.items()},
        }

    def padding_mask(self, ids: torch.Tensor) -> torch.Tensor | None:
        return None if self.pad_id is None else ids != self.pad_id

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.forward_with_states(ids)[0]

    def forward_with_states(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits and the encoder's token states (two towers: ``[B*2, L, D]``, rows alternate the documents).

        One pass serves the classifier and a token-level head (the follow-up's multitask MLM).
        """
        if not self.two_tower:
            mask = self.padding_mask(ids)
            # the release's attention mask (ids > 0; black pixels on the pixel tasks) does not reach pooling
            states = self.encoder(ids, (ids != 0) if self.encoder.release_masking else mask)
            return self.head(states, self.encoder.state_mask(mask)), states
        # Each document is encoded on its own: no token of one reaches the other's vector.
        docs = ids.flatten(0, 1)  # [B*2, L], rows alternate document 1, document 2
        mask = self.padding_mask(docs)
        states = self.encoder(docs, mask)
        vectors = self.head.embed(states, self.encoder.state_mask(mask)).unflatten(0, (ids.shape[0], 2))
        return self.head(vectors[:, 0], vectors[:, 1]), states


def build_model(cfg: dict, task, backbone: BackboneBuilder | None = None) -> SequenceClassifier:
    """The model ``cfg`` describes, sized for ``task`` (a TaskData); ``backbone`` as for ``Encoder``."""
    return SequenceClassifier(
        cfg,
        vocab_size=task.vocab_size,
        max_len=task.max_len,
        num_classes=task.num_classes,
        pad_id=task.pad_id,
        two_tower=task.two_tower,
        backbone=backbone,
    )


def collect_record_info(model: nn.Module) -> dict[str, list | None]:
    """What the model's mixers report for the run record: every mixer's ``TokenMixer.record_info()``
    (name -> collection of values); a name's values are merged over the mixers and sorted, None when
    none ran (the bounded convolution's ``conv_impls``)."""
    merged: dict[str, set] = {}
    for module in model.modules():
        if isinstance(module, TokenMixer):
            for name, values in module.record_info().items():
                merged.setdefault(name, set()).update(values)
    return {name: sorted(values) or None for name, values in merged.items()}
