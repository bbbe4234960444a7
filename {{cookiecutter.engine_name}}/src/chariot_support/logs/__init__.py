"""The engine's logs: JSON lines on stdout, one line per request (written after its answer), and the request id each
line carries; the model's own output, and what native code writes to the file descriptors, as JSON lines too."""
