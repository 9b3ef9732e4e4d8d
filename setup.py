"""Kept for Debian 12's pybuild, whose setuptools plugin builds from setup.py; everything is in setup.cfg."""

from setuptools import setup

setup()
