"""make_optimizer: per-parameter rate hints (S4D/S5 state-space parameters) and the decay rule."""

import torch

from repro.training import TrainSettings, make_optimizer


def _settings(**kw):
    base = dict(lr=0.01, weight_decay=0.05, batch_size=4, epochs=1, schedule="constant")
    base.update(kw)
    return TrainSettings.from_dict(base)


def test_hinted_parameters_get_their_own_rate_and_decay():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    ssm = torch.nn.Parameter(torch.zeros(4, 4))
    ssm._optim = {"lr": 0.001, "weight_decay": 0.0}
    model.register_parameter("ssm", ssm)
    opt = make_optimizer(model, _settings(), torch.device("cpu"))
    by_param = {id(p): g for g in opt.param_groups for p in g["params"]}
    assert by_param[id(ssm)]["lr"] == 0.001 and by_param[id(ssm)]["weight_decay"] == 0.0
    assert by_param[id(ssm)]["lr_scale"] == 0.001 / 0.01
    assert by_param[id(model[0].weight)]["weight_decay"] == 0.05
    assert by_param[id(model[0].bias)]["weight_decay"] == 0.0  # 1-D: no decay by default
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters()))


def test_schedule_scales_every_group_by_its_ratio():
    """One training step with the engine's loop: the hinted group's rate is the schedule's times its ratio."""
    model = torch.nn.Linear(2, 2)
    model.weight._optim = {"lr": 0.002}
    opt = make_optimizer(model, _settings(), torch.device("cpu"))
    for group in opt.param_groups:  # what repro/training/step.py does each step
        group["lr"] = 0.5 * group.get("lr_scale", 1.0)
    rates = sorted(g["lr"] for g in opt.param_groups if g["params"])
    assert rates == [0.5 * 0.2, 0.5]
