"""The token-mixer interface (repro/models/mixer.py): every mixer derives from it, its defaults hold."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from repro.models import model as model_module
from repro.models.mixer import TokenMixer
from repro.original.attention import load_all
from repro.training.batching import model_is_length_flexible


class Identity(TokenMixer):
    """A mixer that declares nothing: every field keeps the base class's default."""

    def forward(self, x, mask):
        return x


def encoder_with(monkeypatch, mixers, **cfg):
    monkeypatch.setattr(model_module, "get_backbone", lambda name: lambda cfg, max_len: mixers)
    return model_module.Encoder({"d_model": 4, "backbone": "fake", **cfg}, vocab_size=5, max_len=3)


def test_every_attention_mechanism_is_a_token_mixer():
    table = load_all()
    assert len(table.names()) >= 11
    assert [name for name in table.names() if not issubclass(table.get(name), TokenMixer)] == []


def test_a_backbone_that_builds_another_module_is_refused(monkeypatch):
    with pytest.raises(TypeError) as err:
        encoder_with(monkeypatch, [nn.Linear(4, 4)])
    assert str(err.value) == (
        "model.backbone='fake' built a Linear, which is not a token mixer: derive it from repro.models.mixer.TokenMixer"
    )


def test_a_mixer_that_declares_nothing_gets_the_defaults(monkeypatch):
    mixer = Identity()
    assert (mixer.RELEASE_ZERO_MASK, mixer.RELEASE_WIDTH_IS_INPUT, dict(mixer.PLAIN_PATH)) == (None, False, {})
    with pytest.raises(ValueError, match=r"^model.release_masking=true: Identity does not implement"):
        encoder_with(monkeypatch, [mixer], release_masking=True)
    encoder = encoder_with(monkeypatch, [mixer])
    holder = nn.Module()
    holder.encoder = encoder
    assert not model_is_length_flexible(holder)
    assert model_module.collect_record_info(holder) == {}


def test_declared_fields_reach_their_readers(monkeypatch):
    class Declares(Identity):
        RELEASE_ZERO_MASK = "ignored"
        length_flexible = True

        def record_info(self):
            return {"seen": {"b", "a"}}

    assert encoder_with(monkeypatch, [Declares()], release_masking=True).takes_mask == [False]
    holder = nn.Module()
    holder.encoder = encoder_with(monkeypatch, [Declares(), Identity()])
    assert model_module.collect_record_info(holder) == {"seen": ["a", "b"]}
    assert not model_is_length_flexible(holder)  # one mixer (Identity) does not declare it
    holder.encoder = encoder_with(monkeypatch, [Declares(), Declares()])
    assert model_is_length_flexible(holder)
    assert holder.encoder(torch.tensor([[1, 2, 3]]), None).shape == (1, 3, 4)
