"""The engine's logs: JSON lines on stdout, one line per request (written after its answer), and the request id each
line carries."""
