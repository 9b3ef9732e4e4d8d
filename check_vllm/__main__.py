"""`python -m check_vllm` is the check itself."""

from check_vllm.nagios.cli import main

main()
