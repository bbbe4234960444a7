"""An engine whose model's first predict is slow and whose predict logs, prints and writes to stderr."""
