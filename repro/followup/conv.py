"""The follow-up's bounded-kernel convolution layer (the follow-up study, section 8, appendix A.2, Table 7).

"Each layer starts with a convolution that maps the input embeddings to H
channels, with kernel sizes varying between experiments ... After a
non-linearity, a linear layer returns back to D channels." The residual
connection and the (pre-)layer norm are the shared block's (``repro.models.model``).

The convolution is 'same'-padded and symmetric (K odd), so each output sees
K//2 tokens to each side: the receptive field per layer of the follow-up study's Table 1.
Padded positions are zeroed before the convolution, so a sequence's outputs do
not depend on how much padding follows it. How the convolution runs on a GPU
(``model.conv_impl``, default ``auto``) is ``repro/ops/conv.py``'s business.
"""

from __future__ import annotations

import torch
from torch import nn

from ..models.mixer import BACKBONES, TokenMixer
from ..ops.conv import IMPL_CHOICES, choose_impl, conv1d_same, conv1d_same_windows, ran_as

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


class BoundedConvMixer(TokenMixer):
    """Conv D->H (kernel K, groups g), activation, linear H->D (the follow-up study, appendix A.2)."""

    # Padded positions are zeroed before the convolution and the linear layer is per token, so
    # trimming trailing padding leaves every real position's output unchanged (repro/training/batching.py).
    length_flexible = True
    # Packed (train.pack_sequences): the same zeroing, with K // 2 empty slots between examples, so that no
    # output of one sees a token of another, as 'same' padding sees zeros past each end of an example.
    packable = True

    def __init__(
        self,
        d_model: int,
        d_hidden: int,
        kernel_size: int,
        groups: int = 1,
        activation: str = "relu",
        impl: str = "auto",
    ):
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"kernel_size={kernel_size}: use an odd kernel so the convolution is symmetric")
        if d_model % groups or d_hidden % groups:
            raise ValueError(f"groups={groups} must divide d_model={d_model} and d_hidden={d_hidden}")
        if impl not in IMPL_CHOICES:
            raise ValueError(f"model.conv_impl={impl!r}: choose one of {', '.join(IMPL_CHOICES)}")
        self.conv = nn.Conv1d(d_model, d_hidden, kernel_size, groups=groups)
        self.activation = ACTIVATIONS[activation]()
        self.out = nn.Linear(d_hidden, d_model)
        self.groups = groups
        self.impl = impl
        self.resolved_impls: set[str] = set()  # what ran, every shape seen (run records; bucketed widths differ)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, window: int | None = None) -> torch.Tensor:
        """``window``: convolve in windows of that many positions (``conv1d_same_windows``), the same function."""
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        h_in = x.transpose(1, 2)
        rows = None if window is None else window + 2 * self.packing_gap()  # what the convolution runs on
        impl = choose_impl(h_in, self.conv.kernel_size[0], self.groups, rows) if self.impl == "auto" else self.impl
        self.resolved_impls.add(ran_as(impl, h_in))
        if window is None:
            h = conv1d_same(h_in, self.conv.weight, self.conv.bias, self.groups, impl)
        else:
            h = conv1d_same_windows(h_in, self.conv.weight, self.conv.bias, self.groups, impl, window)
        h = self.activation(h.transpose(1, 2))
        return self.out(h)

    def packing_gap(self) -> int:
        return self.conv.kernel_size[0] // 2

    def forward_packed(self, x: torch.Tensor, packed) -> torch.Tensor:
        """The stream [1, S, D] with its empty slots zeroed, convolved in windows that, with their K // 2
        inputs on either side, are as long as the padded batch's rows (``packed.length``, where it is over
        twice the kernel): the shape, and so the implementation ``conv_impl=auto`` picks, of the padded
        batch, where one row of the stream's length can fall on a slow cuDNN kernel."""
        halo = 2 * self.packing_gap()
        window = packed.length - halo if packed.length > 2 * halo else packed.length
        return self.forward(x, packed.real, window=window)

    def record_info(self) -> dict[str, set[str]]:
        """For the run record (``repro.models.model.collect_record_info``): the conv implementations that ran."""
        return {"conv_impls": self.resolved_impls}

    def conv_flops(self, batch: int, length: int) -> int:
        """Multiply-adds x2 of the convolution's forward pass."""
        c_out, c_in_per_group, k = self.conv.weight.shape
        return 2 * batch * length * c_out * c_in_per_group * k


@BACKBONES.register("conv")
def build_conv_layers(cfg: dict, max_len: int) -> list[TokenMixer]:
    """``depth`` bounded-conv mixers, one residual sublayer each (the follow-up study, Table 7).

    ``max_len`` is unused: no parameter of the layer depends on the sequence length."""
    return [
        BoundedConvMixer(
            d_model=cfg["d_model"],
            d_hidden=cfg["d_hidden"],
            kernel_size=cfg["kernel_size"],
            groups=cfg.get("groups", 1),
            activation=cfg.get("activation", "relu"),
            impl=cfg.get("conv_impl", "auto"),
        )
        for _ in range(cfg["depth"])
    ]
