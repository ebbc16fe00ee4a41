"""A Jepsen-style checker: client processes record what they did while a nemesis kills and pauses
the coordinator and the clients; afterwards a checker decides DESIGN.md's invariants from those
histories, what readers saw meanwhile, the final state and the coordinator's log.

``python -m tests.jepsen --seconds 120 --seed 7`` runs one on an embedded broker of its own and
prints the report; ``tests/integration/test_jepsen.py`` runs a short one in the test suite.
"""
