"""Stands in for httptools in the baseline's process only, so that the baseline runs MLServer as
`pip install mlserver==1.7.1` installs it: uvicorn with its pure-Python HTTP parser (h11). The bench's environment
holds httptools because the engine depends on it."""

raise ImportError("the baseline runs without httptools, as a bare MLServer install does")
