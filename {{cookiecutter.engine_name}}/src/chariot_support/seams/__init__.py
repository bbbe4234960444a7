"""Every place the engine relies on what MLServer, uvicorn or gRPC do not promise (private names, undocumented
behaviour), each seam with a named behavioural canary in the tests and a table of what it uses."""
