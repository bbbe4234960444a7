import sys

from chariot_support.dev.deps.cli import main

sys.exit(main())
