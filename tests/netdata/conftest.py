"""The netdata tier: a REAL Netdata agent runs our collector (marked `netdata`; tox -e netdata, or
tox -e package against the installed .deb). The collector's fast tests live in tests/collector.
"""
