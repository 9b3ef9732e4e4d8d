"""The old name of check_vllm.netdata, kept for vllm.plugin launchers written before the move."""
