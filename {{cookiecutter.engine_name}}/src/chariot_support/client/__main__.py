import sys

from chariot_support.client.cli import main

sys.exit(main())
