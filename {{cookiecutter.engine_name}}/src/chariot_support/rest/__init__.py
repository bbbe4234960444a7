"""The REST transport: the front that reads every inference POST into the pipeline, the middlewares that bound
heavy and hostile bodies, and the routes Chariot calls beside MLServer's."""
