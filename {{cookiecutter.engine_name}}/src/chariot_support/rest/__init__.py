"""The REST transport: the inference front that reads every inference POST, has the pipeline answer it and writes the
answer (inference.py), the body reader and the middlewares that bound heavy and hostile bodies, the routes
Chariot calls beside MLServer's, and the page at GET / to try the model in a browser (page.py and its files)."""
