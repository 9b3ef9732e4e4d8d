"""`python -m netdata_plugin.install`: the old name of `python -m check_vllm.netdata.install`."""

import sys

from check_vllm.netdata.install import main

if __name__ == "__main__":
    sys.exit(main())
