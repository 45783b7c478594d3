"""The follow-up's CIFAR-10 augmentation (repro/followup/techniques/cifar_augment.py) on a whole batch at once.

The same chain as the per-image CPU version: a horizontal flip with probability 1/2, AutoAugment
with torchvision's CIFAR-10 policy (its table and magnitude bins are read from torchvision, not
copied), the photometric augmenter (``PHOTOMETRIC``, ``MAGNITUDES``), RandomAffine (10 degrees,
translation 0.1, scale 0.9-1.1, shear 10, bilinear, black fill); the task's grayscale follows as
before. ``stages=AUTOAUGMENT_ONLY`` runs the policy alone (``autoaugment: cifar10``).

Every image draws its own parameters (``sample_params``), all at once from one generator on the
batch's device; ``apply_params`` then runs each operation type once on the whole batch with those
per-image parameters and keeps its result where the image drew it (``torch.where``): a loop over
operation types, none over images, written to need no host synchronisation (``python -m
repro.bench.augment`` checks that on CUDA), so it runs on the GPU beside the model. Each operation
is torchvision's tensor kernel written for a vector of parameters (the same float32 arithmetic, the
same grid of ``affine``); tests/test_augment_batch.py checks each against
``torchvision.transforms.v2.functional`` image by image, and the sampled frequencies and magnitude
ranges against the CPU chain's.

Randomness: the parameters come from ``StepDraws.device_generator`` (seeded by run seed and step),
so the result depends only on (seed, step, device type); the global RNG is not touched. The CPU
chain draws from another stream: the two are equal in distribution, not image for image.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from .cifar_augment import MAGNITUDES, PHOTOMETRIC

FULL_CHAIN = ("flip", "autoaugment", "photometric", "affine")
AUTOAUGMENT_ONLY = ("autoaugment",)
# RandomAffine as cifar_augment.followup_pipeline builds it: degrees, translate fraction, scale range, shear
AFFINE = {"degrees": 10.0, "translate": 0.1, "scale": (0.9, 1.1), "shear": 10.0}

GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
COLOUR = ("Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert")
OPS = ("Identity", *GEOMETRIC, *COLOUR)  # operation codes: OPS.index(name)
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale (used by contrast and saturation)


def cifar10_policy() -> tuple:
    """torchvision's AutoAugment CIFAR-10 policy: 25 sub-policies of two (operation, probability, bin)."""
    return tuple(v2.AutoAugment(v2.AutoAugmentPolicy.CIFAR10)._policies)


CIFAR10_POLICY = cifar10_policy()


def policy_tables(policy: list, height: int, width: int) -> dict[str, Tensor]:
    """The policy as tensors [P, 2]: operation code, probability, magnitude (float64) and whether signed."""
    space = v2.AutoAugment._AUGMENTATION_SPACE
    op, prob, mag, signed = [], [], [], []
    for sub in policy:
        for name, probability, index in sub:
            bins, is_signed = space[name]
            values = bins(10, height, width)
            op.append(OPS.index(name))
            prob.append(float(probability))
            mag.append(float(values[index]) if values is not None else 0.0)
            signed.append(bool(is_signed))
    shape = (len(policy), 2)
    return {
        "op": torch.tensor(op).reshape(shape),
        "prob": torch.tensor(prob, dtype=torch.float64).reshape(shape),
        "mag": torch.tensor(mag, dtype=torch.float64).reshape(shape),
        "signed": torch.tensor(signed).reshape(shape),
    }


def _photometric_tables(photometric: tuple, ranges: list) -> dict[str, Tensor]:
    return {
        "prob": torch.tensor([p for _, p in photometric], dtype=torch.float64),
        "low": torch.tensor([low for low, _ in ranges], dtype=torch.float64),
        "high": torch.tensor([high for _, high in ranges], dtype=torch.float64),
    }


_TABLES: dict = {}  # (what, device) -> tables on that device: copied there once, not at every step


def _on_device(key: tuple, device, make) -> dict[str, Tensor]:
    key = (*key, str(torch.device(device) if device is not None else "cpu"))
    if key not in _TABLES:
        _TABLES[key] = {name: value.to(device) for name, value in make().items()}
    return _TABLES[key]


# ---------------------------------------------------------------- sampling


def _uniform(n: int, low: float, high: float, generator: torch.Generator, device) -> Tensor:
    return low + (high - low) * torch.rand(n, generator=generator, device=device, dtype=torch.float64)


def sample_params(
    batch: int,
    height: int,
    width: int,
    generator: torch.Generator,
    device=None,
    stages: tuple = FULL_CHAIN,
    policy: list | tuple = CIFAR10_POLICY,
    photometric: tuple = PHOTOMETRIC,
    magnitudes: dict = MAGNITUDES,
    affine: dict = AFFINE,
    flip_p: float = 0.5,
) -> dict[str, Tensor]:
    """Every image's parameters for ``stages``, drawn as the CPU chain draws them (the tables may be
    replaced, so that a test can show a wrong table is detected).

    Keys: ``flip`` [B] bool; ``aa_op``, ``aa_mag`` [B, 2] (the applied operation code per slot, 0 when
    the slot is skipped; its signed magnitude); ``ph_apply``, ``ph_mag`` [B, 9] (in ``photometric``'s
    order); ``angle``, ``tx``, ``ty``, ``scale``, ``shear`` [B] (RandomAffine).
    """
    g, dev, out = generator, device, {}
    if "flip" in stages:  # v2.RandomHorizontalFlip: flipped unless rand >= p
        out["flip"] = torch.rand(batch, generator=g, device=dev) < flip_p
    if "autoaugment" in stages:
        tables = _on_device(("policy", repr(policy), height, width), dev, lambda: policy_tables(policy, height, width))
        chosen = torch.randint(len(tables["op"]), (batch,), generator=g, device=dev)
        applied = torch.rand(batch, 2, generator=g, device=dev, dtype=torch.float64) <= tables["prob"][chosen]
        negative = torch.rand(batch, 2, generator=g, device=dev) <= 0.5
        sign = torch.where(tables["signed"][chosen] & negative, -1.0, 1.0).to(torch.float64)
        out["aa_op"] = torch.where(applied, tables["op"][chosen], 0)
        out["aa_mag"] = tables["mag"][chosen] * sign
    if "photometric" in stages:
        n = len(photometric)
        ranges = [magnitudes.get(name, (0.0, 0.0)) for name, _ in photometric]
        key = ("photometric", photometric, tuple(ranges))
        tables = _on_device(key, dev, lambda: _photometric_tables(photometric, ranges))
        probs, low, high = tables["prob"], tables["low"], tables["high"]
        out["ph_apply"] = torch.rand(batch, n, generator=g, device=dev, dtype=torch.float64) < probs
        unit = torch.rand(batch, n, generator=g, device=dev, dtype=torch.float64)
        out["ph_mag"] = low + (high - low) * unit
    if "affine" in stages:
        degrees, shear = float(affine["degrees"]), float(affine["shear"])
        max_dx, max_dy = float(affine["translate"] * width), float(affine["translate"] * height)
        out["angle"] = _uniform(batch, -degrees, degrees, g, dev)
        out["tx"] = torch.round(_uniform(batch, -max_dx, max_dx, g, dev))  # int(round(.)): half to even
        out["ty"] = torch.round(_uniform(batch, -max_dy, max_dy, g, dev))
        out["scale"] = _uniform(batch, *affine["scale"], g, dev)
        out["shear"] = _uniform(batch, -shear, shear, g, dev)
    return out


# ---------------------------------------------------------------- geometry


def inverse_affine_matrix(angle, tx, ty, scale, shear_x, shear_y, cx=0.0, cy=0.0) -> Tensor:
    """torchvision's ``_get_inverse_affine_matrix`` for [B] float64 parameters (degrees; the centre
    relative to the image centre): [B, 2, 3] float64."""
    rot, sx, sy = torch.deg2rad(angle), torch.deg2rad(shear_x), torch.deg2rad(shear_y)
    cos_sy, tan_sx = torch.cos(sy), torch.tan(sx)
    a = torch.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + torch.sin(rot))
    c = torch.sin(rot - sy) / cos_sy
    d = torch.cos(rot) - c * tan_sx
    m0, m1, m3, m4 = d / scale, -b / scale, -c / scale, a / scale
    cx_tx, cy_ty = cx + tx, cy + ty
    m2 = cx - m0 * cx_tx - m1 * cy_ty
    m5 = cy - m3 * cx_tx - m4 * cy_ty
    return torch.stack([torch.stack([m0, m1, m2], -1), torch.stack([m3, m4, m5], -1)], -2)


def warp(images: Tensor, matrix: Tensor, mode: str, fill: float | None) -> Tensor:
    """torchvision's tensor ``affine`` (``_affine_grid`` and ``_apply_grid_transform``) with one inverse
    matrix [B, 2, 3] per image of a uint8 batch [B, C, H, W]."""
    batch, channels, height, width = images.shape
    device = images.device
    theta = matrix.to(torch.float32)
    base = torch.empty(1, height, width, 3, dtype=torch.float32, device=device)
    base[..., 0].copy_(torch.linspace((1.0 - width) * 0.5, (width - 1.0) * 0.5, steps=width, device=device))
    base[..., 1].copy_(torch.linspace((1.0 - height) * 0.5, (height - 1.0) * 0.5, steps=height, device=device)[:, None])
    base[..., 2].fill_(1)
    rescaled = theta.transpose(1, 2).clone()  # divided by the half sizes, as torchvision's _affine_grid
    rescaled[..., 0] /= 0.5 * width
    rescaled[..., 1] /= 0.5 * height
    grid = base.view(1, height * width, 3).expand(batch, -1, -1).bmm(rescaled).view(batch, height, width, 2)
    source = images.to(torch.float32)
    if fill is not None:
        source = torch.cat((source, torch.ones(batch, 1, height, width, device=device)), dim=1)
    out = F.grid_sample(source, grid, mode=mode, padding_mode="zeros", align_corners=False)
    if fill is not None:
        out, mask = out[:, :channels], out[:, channels:].expand(-1, channels, -1, -1)
        if mode == "nearest":
            out = torch.where(mask < 0.5, fill, out)
        else:
            out = (out - fill) * mask + fill
    return out.round_().to(images.dtype)


def autoaugment_matrix(op: Tensor, mag: Tensor, height: int, width: int) -> Tensor:
    """The inverse matrices of AutoAugment's geometric operations (torchvision's ``_apply_image_or_video_transform``;
    identity for the others): [B, 2, 3] float64."""
    zero = torch.zeros_like(mag)
    code = {name: op == OPS.index(name) for name in GEOMETRIC}
    shear = torch.rad2deg(torch.atan(mag))
    shear_x = torch.where(code["ShearX"], shear, zero)
    shear_y = torch.where(code["ShearY"], shear, zero)
    tx = torch.where(code["TranslateX"], torch.trunc(mag), zero)  # int(magnitude)
    ty = torch.where(code["TranslateY"], torch.trunc(mag), zero)
    angle = torch.where(code["Rotate"], -torch.remainder(mag, 360.0), zero)  # rotate: -(angle % 360)
    corner = code["ShearX"] | code["ShearY"]  # shears about pixel (0, 0): centre [-W/2, -H/2]
    cx = torch.where(corner, -0.5 * width, zero)
    cy = torch.where(corner, -0.5 * height, zero)
    return inverse_affine_matrix(angle, tx, ty, torch.ones_like(mag), shear_x, shear_y, cx, cy)


# ---------------------------------------------------------------- colour (uint8 [B, 3, H, W], factors [B])


def _column(values: Tensor) -> Tensor:
    return values.to(torch.float32).view(-1, 1, 1, 1)


def _gray_floor(images: Tensor) -> Tensor:
    r, g, b = images.unbind(dim=-3)
    return r.mul(GRAY_WEIGHTS[0]).add_(g, alpha=GRAY_WEIGHTS[1]).add_(b, alpha=GRAY_WEIGHTS[2]).unsqueeze(-3).floor_()


def blend(images: Tensor, other: Tensor, ratio: Tensor) -> Tensor:
    """torchvision's ``_blend`` with one ratio per image."""
    scaled = images.to(torch.float32) * _column(ratio)
    alpha = _column(1.0 - ratio.to(torch.float64))  # torchvision's add_(other, alpha): one fused multiply-add,
    out = (scaled.double() + other.double() * alpha.double()).to(torch.float32)  # exact in float64, rounded once
    return out.clamp_(0, 255).to(images.dtype)


def brightness(images: Tensor, factor: Tensor) -> Tensor:
    return (images.to(torch.float32) * _column(factor)).clamp_(0, 255).to(images.dtype)


def saturation(images: Tensor, factor: Tensor) -> Tensor:
    return blend(images, _gray_floor(images), factor)


def contrast(images: Tensor, factor: Tensor) -> Tensor:
    return blend(images, _gray_floor(images).mean(dim=(-3, -2, -1), keepdim=True), factor)


def _sharpness_kernel() -> dict[str, Tensor]:
    kernel = torch.full((3, 3), 1.0 / 13.0, dtype=torch.float32)
    kernel[1, 1] = 5.0 / 13.0
    return {"kernel": kernel}


def sharpness(images: Tensor, factor: Tensor) -> Tensor:
    """torchvision's ``adjust_sharpness_image``: the 3x3 smoothing kernel (5 in the middle) blended into the
    interior pixels, the border kept."""
    channels = images.shape[-3]
    kernel = _on_device(("sharpness",), images.device, _sharpness_kernel)["kernel"]  # setting an element of a
    out = images.to(torch.float32)  # CUDA tensor from a number copies it from the host: a synchronisation
    blurred = F.conv2d(out, kernel.expand(channels, 1, 3, 3), groups=channels).round_()
    view = out[..., 1:-1, 1:-1]
    alpha = _column(1.0 - factor.to(torch.float64)).double()  # add_(., alpha) as in blend: one rounding
    view.copy_((view.double() + blurred.sub_(view).double() * alpha).to(torch.float32))
    return out.clamp_(0, 255).to(images.dtype)


def autocontrast(images: Tensor) -> Tensor:
    """torchvision's ``autocontrast_image`` with ``torch.where`` for its masked assignments (no host sync)."""
    image = images.to(torch.float32)
    minimum = image.amin(dim=(-2, -1), keepdim=True)
    maximum = image.amax(dim=(-2, -1), keepdim=True)
    flat = maximum == minimum
    inv_scale = torch.where(flat, 1.0, (maximum - minimum) * (1.0 / 255))
    minimum = torch.where(flat, 0.0, minimum)
    return (image - minimum).div_(inv_scale).clamp_(0, 255).to(images.dtype)


def posterize(images: Tensor, bits: Tensor) -> Tensor:
    """Keep the ``bits`` [B] (integers 0-8) highest bits of every pixel."""
    bits = bits.to(torch.int64).clamp(0, 8)
    mask = ((1 << bits) - 1) << (8 - bits)
    return images & mask.to(torch.uint8).view(-1, 1, 1, 1)


def solarize(images: Tensor, threshold: Tensor) -> Tensor:
    """Invert the pixels at or above ``threshold`` [B] (compared in float32, as torchvision's uint8 >= float)."""
    return torch.where(images.to(torch.float32) >= _column(threshold), images.bitwise_not(), images)


def colour_op(images: Tensor, name: str, magnitude: Tensor) -> Tensor:
    """AutoAugment's colour operation ``name`` with its (signed) magnitudes [B] (torchvision's factors)."""
    if name == "Brightness":
        return brightness(images, 1.0 + magnitude)
    if name == "Color":
        return saturation(images, 1.0 + magnitude)
    if name == "Contrast":
        return contrast(images, 1.0 + magnitude)
    if name == "Sharpness":
        return sharpness(images, 1.0 + magnitude)
    if name == "Posterize":
        return posterize(images, torch.trunc(magnitude))
    if name == "Solarize":
        return solarize(images, 255.0 * magnitude)
    if name == "AutoContrast":
        return autocontrast(images)
    if name == "Equalize":
        return TF.equalize(images)
    if name == "Invert":
        return TF.invert(images)
    raise ValueError(f"unknown AutoAugment operation {name!r}; known: {', '.join(OPS)}")


def photometric_batch(images: Tensor, name: str, magnitude: Tensor) -> Tensor:
    """cifar_augment.photometric_op for a batch, one magnitude per image."""
    if name == "Posterize":
        return posterize(images, torch.trunc(magnitude))  # int(magnitude)
    if name == "Solarize":  # a threshold above 255 inverts nothing
        return torch.where(_column(magnitude) > 255, images, solarize(images, magnitude))
    if name in ("Invert", "AutoContrast", "Equalize"):
        return colour_op(images, name, magnitude)
    if name in ("Contrast", "Sharpness", "Color", "Brightness"):
        return colour_op(images, name, magnitude - 1.0)  # the photometric factor itself
    raise ValueError(f"unknown photometric operation {name!r}; known: {', '.join(n for n, _ in PHOTOMETRIC)}")


# ---------------------------------------------------------------- the chain


def apply_params(images: Tensor, params: dict[str, Tensor], photometric: tuple = PHOTOMETRIC) -> Tensor:
    """The chain on a uint8 batch [B, 3, H, W] with every image's parameters from ``sample_params``."""
    _, _, height, width = images.shape

    def keep_where(chosen: Tensor, changed: Tensor, kept: Tensor) -> Tensor:
        return torch.where(chosen.view(-1, 1, 1, 1), changed, kept)

    if "flip" in params:
        images = keep_where(params["flip"], images.flip(-1), images)
    if "aa_op" in params:
        for slot in range(params["aa_op"].shape[1]):
            op, mag = params["aa_op"][:, slot], params["aa_mag"][:, slot]
            geometric = (op >= OPS.index(GEOMETRIC[0])) & (op <= OPS.index(GEOMETRIC[-1]))
            moved = warp(images, autoaugment_matrix(op, mag, height, width), "nearest", None)
            out = keep_where(geometric, moved, images)
            for name in COLOUR:
                out = keep_where(op == OPS.index(name), colour_op(images, name, mag), out)
            images = out
    if "ph_apply" in params:
        for k, (name, _) in enumerate(photometric):
            changed = photometric_batch(images, name, params["ph_mag"][:, k])
            images = keep_where(params["ph_apply"][:, k], changed, images)
    if "angle" in params:
        zero = torch.zeros_like(params["angle"])
        matrix = inverse_affine_matrix(
            params["angle"], params["tx"], params["ty"], params["scale"], params["shear"], zero
        )
        images = warp(images, matrix, "bilinear", 0.0)
    return images


_COMPILED_APPLY: list = []  # apply_params through torch.compile, made on first use


def compiled_apply_params():
    """``apply_params`` through ``torch.compile`` as one graph (the draws are made before it, eagerly, so
    it is a function of tensors alone), shapes static: one graph per batch size."""
    if not _COMPILED_APPLY:
        _COMPILED_APPLY.append(torch.compile(apply_params, fullgraph=True, dynamic=False))
    return _COMPILED_APPLY[0]


class BatchedCifarAugment:
    """The training transform on the batch's device: RGB uint8 [B, H, W, 3] -> the same shape.

    ``stages``: ``FULL_CHAIN`` (``autoaugment: followup``) or ``AUTOAUGMENT_ONLY`` (``autoaugment: cifar10``).
    """

    def __init__(self, stages: tuple = FULL_CHAIN, compiled: bool = False):
        unknown = set(stages) - set(FULL_CHAIN)
        if unknown:
            raise ValueError(f"unknown augmentation stage(s) {sorted(unknown)}; known: {', '.join(FULL_CHAIN)}")
        self.stages = tuple(stages)
        self.policy = CIFAR10_POLICY
        self.compiled = compiled

    def __call__(self, inputs: Tensor, draws) -> Tensor:
        if inputs.dim() != 4 or inputs.shape[-1] != 3 or inputs.dtype != torch.uint8:
            raise ValueError(
                f"the batched CIFAR augmentation needs RGB uint8 images [B, H, W, 3], got {inputs.dtype} "
                f"{tuple(inputs.shape)}"
            )
        batch, height, width, _ = inputs.shape
        generator = draws.device_generator(inputs.device)
        params = sample_params(batch, height, width, generator, inputs.device, self.stages, self.policy)
        apply = compiled_apply_params() if self.compiled else apply_params
        out = apply(inputs.permute(0, 3, 1, 2), params)
        return out.permute(0, 2, 3, 1).contiguous()

    def __repr__(self) -> str:
        compiled = ", compiled" if self.compiled else ""
        return f"BatchedCifarAugment({', '.join(self.stages)}; on the batch's device{compiled})"


def pick_placement(on: str, device: torch.device) -> str:
    """``task.augment_on`` resolved for a batch on ``device``: auto is the batched path on CUDA, else the
    per-image one."""
    if on == "auto":
        return "gpu" if torch.device(device).type == "cuda" else "cpu"
    return on


class PlacedCifarAugment:
    """The per-image CPU chain or the batched one, as ``task.augment_on`` (cpu | gpu | auto) picks for the
    batch's device; gpu runs the batched chain wherever the batch is (on a CPU batch too)."""

    def __init__(self, per_image, stages: tuple, on: str = "auto"):
        if on not in ("auto", "cpu", "gpu"):
            raise ValueError(f"task.augment_on={on!r}: choose auto, cpu or gpu")
        self.per_image, self.batched, self.on = per_image, BatchedCifarAugment(stages), on
        self.ran: set[str] = set()  # the paths this process used, for the run record

    def set_compiled(self, on: bool) -> None:
        """``train.compile_transforms``: the batched chain through torch.compile (the per-image one as is)."""
        self.batched.compiled = on

    def __call__(self, inputs: Tensor, draws) -> Tensor:
        placement = pick_placement(self.on, inputs.device)
        self.ran.add(placement)
        return (self.batched if placement == "gpu" else self.per_image)(inputs, draws)

    def __repr__(self) -> str:
        ran = ", ".join(sorted(self.ran)) or "none yet"
        return f"{self.per_image!r} (cpu) | {self.batched!r} (gpu); augment_on={self.on}, ran: {ran}"


__all__ = [
    "AFFINE",
    "AUTOAUGMENT_ONLY",
    "FULL_CHAIN",
    "OPS",
    "BatchedCifarAugment",
    "PlacedCifarAugment",
    "apply_params",
    "cifar10_policy",
    "compiled_apply_params",
    "inverse_affine_matrix",
    "pick_placement",
    "policy_tables",
    "sample_params",
    "warp",
]
