"""Neotoma's own semantics, computed exactly as a Neotoma server computes them: entity
identity and its normalisation, the JavaScript value rules the ids depend on, the
schema table a server declares, undeclared fields, and the soft deletion of what a
conversation owns.

What lives here changes when the server changes, and is checked against recorded
vectors of a real server (tests/neotoma/test_identity*.py, tests/neotoma/test_type_vectors.py).
"""
