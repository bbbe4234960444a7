"""The one way from a transport to the model: the pipeline every inference request goes through, whatever its
protocol, and the engine's data plane over MLServer's (the model named as Chariot names it, readiness that means
loaded)."""
