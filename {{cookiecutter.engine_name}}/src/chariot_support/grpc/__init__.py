"""The gRPC transport: the V2 inference service, and what one call may hold (calls at once, message bytes, read
deadlines)."""
