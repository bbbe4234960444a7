import sys

from chariot_support.evaluate.cli import main

sys.exit(main())
