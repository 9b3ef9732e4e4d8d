"""The incident tier (tox -e incident): see conftest.py."""
