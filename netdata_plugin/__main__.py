"""`python -m netdata_plugin` and launchers that import it: the collector now lives in check_vllm.netdata."""

import sys

from check_vllm.netdata.__main__ import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
