"""``python -m tools.protocol_doc [--check]`` (see :mod:`tools.protocol_doc`)."""

import sys

from tools.protocol_doc.command import main

sys.exit(main())
