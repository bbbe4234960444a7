"""The REST transport: the inference front that reads every inference POST, has the pipeline answer it and writes the
answer (inference.py), the body reader and the middlewares that bound heavy and hostile bodies, and the routes
Chariot calls beside MLServer's."""
