"""From a parsed request to the model and back: the pipeline, the runtime and its threads, batching, model copies,
admission budgets, parallel workers, the data plane, logs and metrics, and start-up."""
