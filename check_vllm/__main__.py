"""`python -m check_vllm` is the check itself."""

from .cli import main

main()
