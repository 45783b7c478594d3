"""One run: its settings composed and resolved, checked, budgeted, executed and written as a record.

``runner.py`` executes a run (settings -> training -> record); ``validate.py`` refuses bad settings
before any work; ``budget.py`` turns an example budget into a step cap, from the papers' protocol
(``protocol.py``, which also gives the share of the protocol a record ran); ``footprint.py`` sizes a run's
model and checkpoint from its settings alone.
"""
