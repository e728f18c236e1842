"""``python -m kyai.gateway``: the same as ``kyai judge-gateway``."""

import sys

from kyai.gateway.cli import main

sys.exit(main())
