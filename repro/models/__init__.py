"""The shared encoder every backbone plugs its token mixers into (``model.py``) and the classifier heads
(``heads.py``); the mixers themselves live in ``repro/original/`` and ``repro/followup/``."""
