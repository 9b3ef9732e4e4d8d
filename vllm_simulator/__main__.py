"""``python -m vllm_simulator``: the same as the ``vllm-simulator`` console script."""

from .cli import main

raise SystemExit(main())
