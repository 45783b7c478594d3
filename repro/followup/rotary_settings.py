"""The rotary Transformer's own model keys and the value a config that omits one gets.

Read by its builder (``rotary.py``) and by the runner's implicit settings, which need the defaults
without loading the model's modules (rotary-embedding-torch, flex attention).
"""

from __future__ import annotations

ROTARY_DEFAULTS = {
    "rotary": True,
    "rotary_base": 10000.0,
    "rotary_disable_half": False,
    "rotary_impl": "auto",
    "attention_backend": "auto",
    "rotary_layout": "per_head",
    "rotary_disable": "lower_half",
}
